"""Installs tfrl (the library) and learners (its programs).

The pins follow BUILD_NOTES.md: dm-reverb 0.14.0 is built against TensorFlow 2.15, and
everything else is chosen to match that pair. Do not loosen them one at a time.
"""
import setuptools

INSTALL_REQUIRES = [
    'tensorflow==2.15.1',
    'tensorflow-probability==0.23.0',
    'dm-reverb==0.14.0',
    'tf-agents==0.19.0',
    'gymnasium>=1.0,<2',
    'numpy>=1.23,<2',  # TF 2.15 is built against NumPy 1.x.
    'gin-config>=0.5',
    'absl-py>=1.0',
    'portpicker>=1.5',
    'tqdm>=4.60',  # progress bars (notebooks' on_progress)
    # TensorBoard 2.15 (TensorFlow 2.15's) imports pkg_resources, which setuptools 82
    # removed: without this bound `tensorboard` does not start in a new venv.
    'setuptools<82',
]

# Environment suites (tfrl.envs.make names the extra when one is missing).
ENV_EXTRAS = {
    # ale-py wheels include the ROMs; AtariPreprocessing resizes with OpenCV, whose
    # releases from 4.11 on need NumPy 2.
    'atari': ['ale-py>=0.9', 'opencv-python>=4.5,<4.11'],
    # The wheel gymnasium >= 1.1 names (no swig build); LunarLander also imports pygame,
    # which tf-agents already installs.
    'box2d': ['box2d==2.3.10'],
    'mujoco': ['mujoco>=2.3.3', 'imageio>=2.14.1'],  # v5 envs' minimum; gymnasium imports imageio
    'minigrid': ['minigrid>=2.3'],
}
# tfrl.envs.make(backend='envpool'): EnvPool's C++ classic-control, Box2D, MuJoCo and
# Atari envs (tfrl/envs/envpool_env.py). 1.2.5 has a cp311 manylinux wheel and takes
# NumPy 1.26; its optree resolves to 0.15 under tf-agents' typing-extensions 4.5 pin.
ENVPOOL = ['envpool==1.2.5']
# Ray Core for `tfrl-launch --backend=ray`: 2.60.0 installs beside TensorFlow 2.15's
# protobuf 4 and tf-agents' typing-extensions 4.5 (checked with pip's resolver).
RAY = ['ray==2.60.0']
# MP4s of episodes (tfrl.envs.video): gymnasium's RecordVideo checks for moviepy (2.x
# pins pillow < 12); the files are written with imageio's ffmpeg writer.
VIDEO = ['moviepy>=2.1,<3', 'imageio>=2.14.1', 'imageio-ffmpeg>=0.4']

# RLDS datasets (tfrl.datasets): TFDS's RLDS format and its SequentialWriter. TFDS
# 4.9.10 takes any tensorflow-metadata; from 1.17 on those need protobuf 5, which
# TensorFlow 2.15 refuses, and pip does not backtrack over it: pinned here.
# TFDS also pulls pyarrow, whose newest releases need NumPy 2: Ray then fails to start
# (it imports pyarrow when present). 17 takes NumPy 1.x.
OFFLINE = ['tensorflow-datasets>=4.9.4,<4.10', 'tensorflow-metadata>=1.14,<1.17',
           'protobuf>=4.25,<5', 'pyarrow>=14,<18']

# The documentation site: MkDocs, its Material theme, and mkdocstrings' Python handler for
# the API pages (griffe 2, which reads the source without importing TensorFlow; ruff
# wraps the signatures it shows). The Makefile's docs-install target installs the same
# ranges alone.
DOCS = ['mkdocs>=1.6,<2', 'mkdocs-material>=9.5,<10', 'mkdocstrings[python]>=0.30,<2',
        'mkdocstrings-python>=2.0,<3', 'ruff>=0.5,<1']

# The benchmarks' statistics: benchmarks/stats.py's intervals are rliable's (its tests
# compare them with rliable's own), and its performance profiles call rliable. rliable
# 1.2.0 takes arch < 8, and arch 7.2 fails on import under pandas 3 (a decorator whose
# signature pandas changed), so pandas stays below 3. NumPy stays below 2 through
# INSTALL_REQUIRES: resolved without that bound, rliable's scipy and pandas take NumPy 2.
BENCHMARKS = ['rliable==1.2.0', 'pandas<3']

EXTRAS_REQUIRE = {
    **ENV_EXTRAS,
    'ray': RAY,
    'video': VIDEO,
    'envpool': ENVPOOL,
    'offline': OFFLINE,
    'benchmarks': BENCHMARKS,
    # The tests run every suite's configs briefly and a Ray cluster, so dev pulls them.
    # pytest < 9: pytest-xdist 3.8 groups tests (make test's lanes, --dist loadgroup)
    # by rewriting a private node id that pytest 9 no longer reads.
    # The documentation site (mkdocs.yml, `make docs`); tests/test_docs.py builds it.
    'dev': ['pytest>=7,<9', 'pytest-timeout>=2.1', 'pytest-xdist>=3.5', 'psutil>=5'] + DOCS + RAY + VIDEO + ENVPOOL + OFFLINE + BENCHMARKS + sorted(
        {package for packages in ENV_EXTRAS.values() for package in packages}),
    # tf-agents 0.19 pins typing-extensions 4.5.0; IPython >= 8.19 needs a newer one.
    # ipywidgets: tqdm's progress bars as notebook widgets.
    'notebooks': ['nbclient>=0.7', 'nbformat>=5', 'ipykernel>=6', 'ipython<8.19',
                  'matplotlib>=3.5', 'ipywidgets>=8'],
}

setuptools.setup(
    name='tfrl',
    version='0.1.0',
    description='TensorFlow 2 reinforcement learning with Reverb replay, at scale.',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    packages=setuptools.find_packages(include=['tfrl', 'tfrl.*', 'learners', 'learners.*']),
    package_data={'learners': ['configs/*.gin']},
    python_requires='>=3.9,<3.12',
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={'console_scripts': [
        'tfrl-train-eval=learners.train_eval:run_main',
        'tfrl-reverb-server=learners.reverb_server:run_main',
        'tfrl-collect=learners.collect:run_main',
        'tfrl-train=learners.train:run_main',
        'tfrl-eval=learners.eval:run_main',
        'tfrl-launch=learners.launch:run_main',
        'tfrl-pbt=learners.pbt:run_main',
        'tfrl-export=learners.export_policy:run_main',
        'tfrl-convert-dataset=learners.convert_dataset:run_main',
    ]},
    classifiers=[
        'Programming Language :: Python :: 3',
        'Operating System :: POSIX :: Linux',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
