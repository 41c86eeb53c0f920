"""No function in tfrl/, learners/ or benchmarks/ runs past 80 lines of code.

A line of code is a line holding a token of the program: blank lines, comment-only lines
and the function's own docstring do not count (a nested function's lines count toward
the function that holds it too). Long functions are where the repository's bugs hid;
past this length, split one into well-named pieces.
"""
import ast
import io
import os
import tokenize
from typing import Iterator, List, Set, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKED_DIRS = ('tfrl', 'learners', 'benchmarks')
MAX_LINES_OF_CODE = 80
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
             tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}


def code_lines(source: str) -> Set[int]:
  """The 1-based numbers of the lines holding a token other than comments and layout.

  Args:
    source: a Python module's text.

  Returns:
    The line numbers; a token spanning lines (a triple-quoted string) marks each.
  """
  lines = set()
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type not in _NOT_CODE:
      lines.update(range(token.start[0], token.end[0] + 1))
  return lines


def _docstring_lines(node: ast.AST) -> Set[int]:
  first = node.body[0] if node.body else None
  if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
      and isinstance(first.value.value, str)):
    return set(range(first.lineno, first.end_lineno + 1))
  return set()


def function_sizes(source: str) -> Iterator[Tuple[int, str, int]]:
  """(line, qualified name, lines of code) of every function and method in `source`.

  Args:
    source: a Python module's text.

  Yields:
    One tuple per function, nested ones included ('Class.method', 'outer.inner').
  """
  code = code_lines(source)

  def visit(node: ast.AST, prefix: str) -> Iterator[Tuple[int, str, int]]:
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = prefix + child.name
        span = set(range(child.lineno, child.end_lineno + 1))
        yield child.lineno, name, len((span & code) - _docstring_lines(child))
        yield from visit(child, name + '.')
      elif isinstance(child, ast.ClassDef):
        yield from visit(child, prefix + child.name + '.')
      else:
        yield from visit(child, prefix)

  yield from visit(ast.parse(source), '')


def _python_files() -> Iterator[str]:
  for top in CHECKED_DIRS:
    for directory, subdirectories, names in os.walk(os.path.join(REPO, top)):
      # Not the project's code: virtual environments (benchmarks/peers/.venv) and caches.
      subdirectories[:] = [d for d in subdirectories
                           if not d.startswith('.') and d != '__pycache__']
      for name in sorted(names):
        if name.endswith('.py'):
          yield os.path.join(directory, name)


def test_counts_code_lines_not_docstrings_comments_or_blanks():
  source = '\n'.join([
      'def f(x):',
      '  """A docstring',
      '  over two lines."""',
      '  # a comment',
      '',
      '  y = """a string',
      'that is code"""',
      '  return x  # trailing',
      '',
      'class C:',
      '  def m(self):',
      '    def inner():',
      '      pass',
      '    return inner',
  ])
  assert list(function_sizes(source)) == [(1, 'f', 4), (11, 'C.m', 4),
                                          (12, 'C.m.inner', 2)]


def test_no_function_is_longer_than_80_lines_of_code():
  offenders: List[str] = []
  for path in _python_files():
    with open(path, encoding='utf-8') as f:
      source = f.read()
    for line, name, size in function_sizes(source):
      if size > MAX_LINES_OF_CODE:
        offenders.append(f'{os.path.relpath(path, REPO)}:{line} {name} {size}')
  assert not offenders, (
      f'functions over {MAX_LINES_OF_CODE} lines of code (docstring, comments and blank '
      'lines not counted); split them:\n' + '\n'.join(offenders))
