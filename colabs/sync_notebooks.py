"""Keeps every notebook's first cells in line: the Colab badge under its title, and the
set-up cell from colabs/setup_cell.py (with the notebook's extras).

    .venv/bin/python colabs/sync_notebooks.py          # rewrite the notebooks
    .venv/bin/python colabs/sync_notebooks.py --check  # exit 1 if one is out of line

The test suite runs the check (tests/colabs/test_notebooks.py).
"""
import os
import re
import sys

import nbformat

COLABS = os.path.dirname(os.path.abspath(__file__))
SETUP_CELL = os.path.join(COLABS, 'setup_cell.py')
# notebook -> the tfrl extras its set-up cell installs (default: 'notebooks').
EXTRAS = {'atari.ipynb': 'atari,notebooks', 'impala_clear.ipynb': 'minigrid,notebooks'}
BADGE = re.compile(r'\n*\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\n*')


def repo_url() -> str:
  """TFRL_REPO_URL of setup_cell.py: the one place that holds the repository's URL."""
  with open(SETUP_CELL) as f:
    return re.search(r"^TFRL_REPO_URL = '([^']+)'", f.read(), re.M).group(1)


def badge(name: str) -> str:
  """The badge that opens colabs/<name> from the repository in Colab."""
  github = repo_url().replace('https://github.com/', '')
  return ('[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]'
          f'(https://colab.research.google.com/github/{github}/blob/main/colabs/{name})')


def setup_source(name: str) -> str:
  with open(SETUP_CELL) as f:
    text = f.read().rstrip('\n')
  return text.replace("EXTRAS = 'notebooks'", f"EXTRAS = '{EXTRAS.get(name, 'notebooks')}'")


def synced(name: str, notebook) -> bool:
  """Puts the badge and the set-up cell in place; returns whether anything changed."""
  changed = False
  title = notebook.cells[0]
  head, _, rest = BADGE.sub('\n', title.source).strip('\n').partition('\n')
  source = '\n\n'.join([head, badge(name)] + ([rest.strip('\n')] if rest.strip() else []))
  if title.cell_type != 'markdown':
    raise ValueError(f'{name}: the first cell must be the markdown title')
  if title.source != source:
    title.source, changed = source, True
  setup = next(cell for cell in notebook.cells if cell.cell_type == 'code')
  if setup.source != setup_source(name):
    setup.source, changed = setup_source(name), True
  return changed


def main(argv) -> int:
  check = '--check' in argv
  stale = []
  for name in sorted(os.listdir(COLABS)):
    if not name.endswith('.ipynb'):
      continue
    path = os.path.join(COLABS, name)
    notebook = nbformat.read(path, as_version=4)
    if synced(name, notebook):
      stale.append(name)
      if not check:
        nbformat.write(notebook, path)
  if stale:
    print(('out of line: ' if check else 'rewrote: ') + ', '.join(stale))
  return 1 if check and stale else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
