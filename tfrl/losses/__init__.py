"""Pure loss and return functions (time-major [T, B]); they import nothing of tfrl."""
from tfrl.losses import cloning
from tfrl.losses import policy_gradient
from tfrl.losses import reductions
from tfrl.losses import returns
from tfrl.losses import vtrace
