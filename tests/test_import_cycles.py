"""No import cycle among tfrl's and learners' modules, function-level imports included.

A module imports another when it names it (`import tfrl.x`, `from tfrl import x`,
`from tfrl.x import name`) anywhere in its text: an import inside a function is a
dependency as much as one at the top, only later. Read statically (no module runs).
"""
import ast
import os
from typing import Dict, List, Optional, Set

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('tfrl', 'learners')


def modules() -> Dict[str, str]:
  """Dotted module name -> file, for every module of PACKAGES (a package: its
  __init__)."""
  found = {}
  for package in PACKAGES:
    for directory, subdirectories, names in os.walk(os.path.join(REPO, package)):
      subdirectories[:] = [d for d in subdirectories if d != '__pycache__']
      for name in names:
        if name.endswith('.py'):
          path = os.path.join(directory, name)
          dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, '.')
          found[dotted[:-len('.__init__')] if dotted.endswith('.__init__') else dotted] = path
  return found


def _module_of(name: str, known: Dict[str, str]) -> Optional[str]:
  """The longest known module `name` starts with (a name imported from a module is
  that module)."""
  while name and name not in known:
    name = name.rpartition('.')[0]
  return name or None


def imports(known: Dict[str, str]) -> Dict[str, Set[str]]:
  """Module -> the known modules it imports."""
  graph = {}
  for module, path in known.items():
    with open(path) as f:
      tree = ast.parse(f.read())
    names = []
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        names += [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names += [f'{node.module}.{alias.name}' for alias in node.names]
    graph[module] = {m for m in map(lambda n: _module_of(n, known), names)
                     if m and m != module}
  return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
  """The graph's strongly connected components of more than one module (Tarjan's)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for other in sorted(graph[node]):
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in on_stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return found


def test_no_module_imports_itself_through_others():
  assert cycles(imports(modules())) == []


def test_a_cycle_is_found_where_there_is_one():
  graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}
  assert cycles(graph) == [['a', 'b', 'c']]
  assert cycles({'a': {'b'}, 'b': set()}) == []


# learners' packages, lowest first. Each imports only itself and those before it, never a
# program (a module at learners' top); tfrl imports none of learners. The packages'
# __init__ docstrings say the same.
LEARNERS_PACKAGES = ('learners.configuration', 'learners.processes',
                     'learners.population', 'learners.job')


def _learners_package(module: str) -> Optional[str]:
  return next((p for p in LEARNERS_PACKAGES if module == p or module.startswith(p + '.')),
              None)


def test_imports_go_down_learners_packages_and_never_from_tfrl_to_learners():
  wrong = []
  for module, imported in sorted(imports(modules()).items()):
    into_learners = sorted(m for m in imported if m.split('.')[0] == 'learners')
    if module.split('.')[0] == 'tfrl':
      wrong += [(module, m) for m in into_learners]
    package = _learners_package(module)
    if package:
      allowed = LEARNERS_PACKAGES[:LEARNERS_PACKAGES.index(package) + 1]
      wrong += [(module, m) for m in into_learners if _learners_package(m) not in allowed]
  assert wrong == []
