# Set-up, the same in every tfrl notebook (colabs/sync_notebooks.py copies this file into
# each). tfrl installs from a clone: opened from one, this cell installs that clone;
# elsewhere (Colab) it installs from the git URL in the environment variable
# TFRL_REPO_URL, if you set one. tfrl runs on Python 3.9-3.11: its Reverb and
# TensorFlow (dm-reverb 0.14, TensorFlow 2.15) have wheels for no later Python.
import importlib, importlib.util, os, subprocess, sys

EXTRAS = 'notebooks'  # the tfrl extras this notebook uses

if not (3, 9) <= sys.version_info[:2] <= (3, 11):
    raise SystemExit(
        f'tfrl needs Python 3.9-3.11 and this runtime has {sys.version.split()[0]}. '
        'In Colab: Runtime > Change runtime type > Runtime version "2025.07" '
        '(Python 3.11), then run this cell again. Locally, in your clone of tfrl: '
        f'python3.11 -m venv tfrl-env && tfrl-env/bin/pip install -e ".[{EXTRAS}]" && '
        'tfrl-env/bin/python -m ipykernel install --user --name tfrl, then pick the '
        '"tfrl" kernel.')


def clone_root():
    """The clone this notebook runs in (from its root or from colabs/), if any."""
    for folder in (os.getcwd(), os.path.dirname(os.getcwd())):
        if os.path.isfile(os.path.join(folder, 'setup.py')) and os.path.isdir(
                os.path.join(folder, 'tfrl')):
            return folder
    return None


if importlib.util.find_spec('tfrl') is None:  # a local `make` venv already has it
    root, url = clone_root(), os.environ.get('TFRL_REPO_URL')
    if not root and not url:
        raise SystemExit(
            'tfrl installs from a clone: open this notebook from one, or set TFRL_REPO_URL '
            'to the git URL you serve tfrl from (%env TFRL_REPO_URL=... in a cell above).')
    spec = ['-e', f'{root}[{EXTRAS}]'] if root else [f'tfrl[{EXTRAS}] @ git+{url}']
    print('Installing', spec[-1], '(a few minutes on a fresh runtime) ...')
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', *spec])
    importlib.invalidate_caches()
import tfrl  # imports TensorFlow, tf-agents and Reverb without their start-up noise
import tensorflow as tf
tf.get_logger().setLevel('ERROR')  # TensorFlow's deprecation notices
print(f'tfrl {tfrl.__version__}, TensorFlow {tf.__version__}, Python {sys.version.split()[0]}')
