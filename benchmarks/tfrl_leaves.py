"""tfrl's leaf modules (they import nothing of tfrl's), loaded from their files: for
processes that must not import the tfrl package, which starts TensorFlow (the peers'
venv, a plain serving client).

    seeding = tfrl_leaves.load('seeding')
"""
import importlib.util
import os
import types

TFRL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tfrl')


def load(name: str) -> types.ModuleType:
  """tfrl/<name>.py as a module of its own (not `tfrl.<name>`).

  Args:
    name: a leaf module of tfrl: 'seeding' or 'quotas'.

  Returns:
    The module.

  Raises:
    FileNotFoundError: no tfrl/<name>.py.
  """
  path = os.path.join(TFRL, f'{name}.py')
  spec = importlib.util.spec_from_file_location(f'tfrl_leaf_{name}', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
