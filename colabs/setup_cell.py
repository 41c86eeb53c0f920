# Set-up, the same in every tfrl notebook. tfrl runs on Python 3.9-3.11: its Reverb and
# TensorFlow (dm-reverb 0.14, TensorFlow 2.15) have wheels for no later Python.
import importlib, importlib.util, os, subprocess, sys

# A PLACEHOLDER: tfrl has no public repository yet. Put the URL of the repository you
# serve it from here (the one place that holds it; colabs/sync_notebooks.py copies it
# into every notebook and its Colab badge, tests check the README and deploy/).
TFRL_REPO_URL = 'https://github.com/tfrl-dev/tfrl'
EXTRAS = 'notebooks'  # the tfrl extras this notebook uses

if not (3, 9) <= sys.version_info[:2] <= (3, 11):
    raise SystemExit(
        f'tfrl needs Python 3.9-3.11 and this runtime has {sys.version.split()[0]}. '
        'In Colab: Runtime > Change runtime type > Runtime version "2025.07" '
        '(Python 3.11), then run this cell again. Locally: python3.11 -m venv tfrl-env && '
        f'tfrl-env/bin/pip install "tfrl[{EXTRAS}] @ git+{TFRL_REPO_URL}" && '
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
    root = clone_root()
    spec = ['-e', f'{root}[{EXTRAS}]'] if root else [f'tfrl[{EXTRAS}] @ git+{TFRL_REPO_URL}']
    print('Installing', spec[-1], '(a few minutes on a fresh runtime) ...')
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', *spec])
    importlib.invalidate_caches()
import tfrl  # imports TensorFlow, tf-agents and Reverb without their start-up noise
import tensorflow as tf
tf.get_logger().setLevel('ERROR')  # TensorFlow's deprecation notices
print(f'tfrl {tfrl.__version__}, TensorFlow {tf.__version__}, Python {sys.version.split()[0]}')
