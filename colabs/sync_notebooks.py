"""Keeps every notebook's set-up cell in line: the one in colabs/setup_cell.py (with the
notebook's extras). It also takes any "Open In Colab" badge out of a title cell: tfrl has
no public repository for a badge to open.

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


def setup_source(name: str) -> str:
  with open(SETUP_CELL) as f:
    text = f.read().rstrip('\n')
  return text.replace("EXTRAS = 'notebooks'", f"EXTRAS = '{EXTRAS.get(name, 'notebooks')}'")


def synced(name: str, notebook) -> bool:
  """Takes out the badge and puts the set-up cell in place; returns whether anything
  changed."""
  changed = False
  title = notebook.cells[0]
  if title.cell_type != 'markdown':
    raise ValueError(f'{name}: the first cell must be the markdown title')
  source = BADGE.sub('\n\n', title.source).strip('\n')
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
