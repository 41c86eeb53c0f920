"""The fork server (learners/processes/fork_server.py): programs start as forks of one
process that imported their libraries, and behave as exec'd programs do."""
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from learners.processes import child_process
from learners.processes import fork_server
from learners.processes import fork_server_process

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Every test here starts processes (a server, its forks, requesters): `integration`.
pytestmark = [pytest.mark.skipif(not fork_server.enabled(), reason='Linux fork server'),
              pytest.mark.integration]


@pytest.fixture(scope='module')
def server(tmp_path_factory):
  log = str(tmp_path_factory.mktemp('fork_server') / 'server.log')
  starter = fork_server.ForkServer(log_path=log,
                                   env=dict(os.environ, PYTHONPATH=REPO))
  yield starter
  starter.close()


def _env(**extra):
  return dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, HERE]), **extra)


def test_a_forked_program_runs_as_an_exec_would(server, tmp_path):
  out, err = tmp_path / 'out', tmp_path / 'err'
  child = server.start(['-m', 'forked_target', '3', '0'], _env(TFRL_TEST_VALUE='seen'),
                       str(out), str(err), cwd=str(tmp_path))
  assert child.wait(timeout=120) == 3
  report = json.loads(out.read_text())
  # orig_argv: what a program that re-executes itself (the trainer's restart) runs.
  assert report == dict(argv=['3', '0'], cwd=str(tmp_path), value='seen', main='__main__',
                        path_ok=True, orig_argv=[sys.executable, '-m', 'forked_target',
                                                 '3', '0'])
  assert err.read_text() == 'on stderr\n'


def test_the_output_files_are_ready_when_start_returns(server, tmp_path):
  """As with Popen: a caller may read the logs at once (they exist, truncated or not)."""
  fresh, old = tmp_path / 'fresh.log', tmp_path / 'old.log'
  old.write_text('earlier run\n')
  child = server.start(['-m', 'forked_target', '0', '60'], _env(), str(fresh), str(old),
                       append=False)
  try:
    assert fresh.exists() and 'earlier run' not in old.read_text()
  finally:
    child.kill()
    child.wait(timeout=60)
  old.write_text('earlier run\n')
  child = server.start(['-m', 'forked_target', '0'], _env(), str(fresh), str(old),
                       append=True)
  assert child.wait(timeout=60) == 0
  assert old.read_text() == 'earlier run\non stderr\n'


def test_a_program_slow_to_run_after_its_fork_starts_without_waiting(tmp_path):
  """A program may first run after its middle parent has exited (here each fork's child
  handlers sleep, as a library's may take time): it must see that it was adopted, not
  wait for a re-parenting that already happened."""
  site = tmp_path / 'site'
  site.mkdir()
  (site / 'sitecustomize.py').write_text(
      'import os, time\nos.register_at_fork(after_in_child=lambda: time.sleep(0.5))\n')
  path = os.pathsep.join([str(site), REPO, HERE])
  starter = fork_server.ForkServer(log_path=str(tmp_path / 'server.log'),
                                   env=dict(os.environ, PYTHONPATH=path))
  try:
    err = tmp_path / 'err'
    child = starter.start(['-m', 'forked_target', '0'], dict(os.environ, PYTHONPATH=path),
                          str(tmp_path / 'out'), str(err))
    assert child.wait(timeout=120) == 0
    assert err.read_text() == 'on stderr\n'  # no "not re-parented within 30 s"
  finally:
    starter.close()


_STARTS_A_PROGRAM = textwrap.dedent("""
    import json, os, sys
    import psutil
    from learners.processes import fork_server
    forks = fork_server.ForkServer.inherited()
    assert forks is not None and fork_server.INHERITED_SERVER_ENV not in os.environ
    child = forks.start(['-m', 'forked_target', '4'], dict(os.environ), sys.argv[1])
    # (waitpid would fail, and the status read 1, were the program not this one's child)
    print(json.dumps(dict(status=child.wait(timeout=60),
                          server_parent=psutil.Process(forks._server.pid).ppid(),
                          me=os.getpid())))
    forks.close()
    """)


def test_a_program_that_starts_programs_gets_its_own_fork_server(server, tmp_path):
  """The launcher's case: its programs fork from a server forked for it (its child),
  with no imports of their own, and are its children."""
  out = tmp_path / 'out'
  child = server.start(['-c', _STARTS_A_PROGRAM, str(tmp_path / 'inner')], _env(),
                       str(out), with_fork_server=True)
  assert child.wait(timeout=120) == 0, out.read_text()
  report = json.loads(out.read_text().splitlines()[-1])
  assert report['status'] == 4
  assert report['server_parent'] == report['me'] == child.pid
  assert json.loads((tmp_path / 'inner').read_text().splitlines()[0])['argv'] == ['4']


def test_only_programs_that_start_programs_get_a_fork_server(server, tmp_path):
  out = tmp_path / 'out'
  code = ('import os; from learners.processes import fork_server; '
          'print(fork_server.ForkServer.inherited() is None)')
  child = server.start(['-c', code], _env(**{fork_server.INHERITED_SERVER_ENV: '1:5:6'}),
                       str(out))
  assert child.wait(timeout=60) == 0, out.read_text()
  assert out.read_text() == 'True\n'  # nor does it take the requester's variable


def test_a_forked_program_is_the_callers_child_and_shows_its_own_command(server, tmp_path):
  child = server.start(['-m', 'forked_target', '0', '60'], _env(), str(tmp_path / 'out'),
                       cwd=str(tmp_path))
  try:
    process = psutil.Process(child.pid)
    assert process.ppid() == os.getpid()
    assert process.cmdline()[:4] == [sys.executable, '-m', 'forked_target', '0']
    assert os.getsid(child.pid) == child.pid  # its own session, like start_new_session
    with pytest.raises(subprocess.TimeoutExpired):
      child.wait(timeout=0.2)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM
  finally:
    child.kill()


def test_an_error_in_the_program_is_its_traceback_and_status_1(server, tmp_path):
  out = tmp_path / 'out'
  child = server.start(['-m', 'no_such_module_here'], _env(), str(out))
  assert child.wait(timeout=60) == 1
  assert 'No module named no_such_module_here' in out.read_text()


def test_programs_die_with_the_process_that_asked_for_them(tmp_path):
  """A requester killed with SIGKILL takes its programs with it (SIGTERM), as the
  launcher's exec'd programs do."""
  script = textwrap.dedent(f"""
      import os, sys, time
      from learners.processes import child_process, fork_server
      env = child_process.child_env(dict(os.environ, PYTHONPATH={REPO + os.pathsep + HERE!r}))
      child = fork_server.ForkServer().start(['-m', 'forked_target', '0', '300'], env,
                                             {str(tmp_path / 'out')!r})
      print(child.pid, flush=True)
      time.sleep(300)
  """)
  requester = subprocess.Popen([sys.executable, '-c', script], cwd=REPO, text=True,
                               env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.PIPE)
  try:
    pid = int(requester.stdout.readline())
    program = psutil.Process(pid)
    assert program.ppid() == requester.pid
    requester.kill()
    requester.wait(timeout=30)
    assert program.wait(timeout=60) == -signal.SIGTERM
  finally:
    requester.kill()
    requester.stdout.close()


def test_a_server_started_from_a_thread_outlives_the_thread(tmp_path):
  """A first request from a pool's thread starts the server; the server must serve the
  requests after that thread has ended (PR_SET_PDEATHSIG would end it with the thread)."""
  starter = fork_server.ForkServer(log_path=str(tmp_path / 'server.log'),
                                   env=dict(os.environ, PYTHONPATH=REPO))
  try:
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
      first = pool.submit(starter.start, ['-m', 'forked_target', '0'], _env(),
                          str(tmp_path / 'first')).result()
    assert first.wait(timeout=120) == 0
    time.sleep(1)  # (a SIGTERM on the thread's end arrives at once)
    second = starter.start(['-m', 'forked_target', '0'], _env(), str(tmp_path / 'second'))
    assert second.wait(timeout=60) == 0
  finally:
    starter.close()


def test_a_server_that_ended_is_replaced_at_the_next_request(tmp_path):
  starter = fork_server.ForkServer(log_path=str(tmp_path / 'server.log'),
                                   env=dict(os.environ, PYTHONPATH=REPO))
  try:
    assert starter.start(['-m', 'forked_target', '0'], _env(),
                         str(tmp_path / 'first')).wait(timeout=120) == 0
    server_pid = starter._server.pid  # pylint: disable=protected-access
    os.kill(server_pid, signal.SIGKILL)
    starter._server.wait(timeout=60)  # pylint: disable=protected-access
    assert starter.start(['-m', 'forked_target', '0'], _env(),
                         str(tmp_path / 'second')).wait(timeout=120) == 0
    assert starter._server.pid != server_pid  # pylint: disable=protected-access
  finally:
    starter.close()


def test_the_server_preloads_what_the_programs_import(tmp_path):
  """After `preload`, a program module adds only itself (a few modules at most): its
  libraries were imported before the fork, those its body imports once the flags are
  parsed (tfrl's and learners' modules imported inside its functions) included."""
  script = textwrap.dedent("""
      import ast, importlib, json, os, sys
      from learners.processes import fork_server_process
      fork_server_process.preload()
      before = set(sys.modules)

      def tfrl_imports_anywhere(program):
        with open(importlib.util.find_spec(program).origin) as f:
          tree = ast.parse(f.read())
        for node in ast.walk(tree):
          if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module + '.' + a.name for a in node.names]
          elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
          else:
            continue
          for name in names:
            if name.split('.')[0] in ('learners', 'tfrl') and name != program:
              try:
                importlib.import_module(name)
              except ImportError:  # a function or class of a module
                pass

      for program in fork_server_process.PRELOADED_PROGRAMS:  # each alone: they define flags
        if os.fork() == 0:
          __import__(program)
          tfrl_imports_anywhere(program)
          print(json.dumps({program: sorted(set(sys.modules) - before - {program})}),
                flush=True)
          os._exit(0)
        os.wait()
  """)
  result = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
  assert result.returncode == 0, result.stderr[-3000:]
  new = {}
  for line in result.stdout.splitlines():
    if line.startswith('{'):
      new.update(json.loads(line))
  assert set(new) == set(fork_server_process.PRELOADED_PROGRAMS)
  assert all(len(modules) <= 3 for modules in new.values()), new


def test_a_server_that_cannot_start_is_one_error(tmp_path):
  broken = fork_server.ForkServer(python='/bin/false', log_path=str(tmp_path / 'log'))
  with pytest.raises(fork_server.ForkServerError, match='fork server ended'):
    broken.start(['-m', 'forked_target', '0'], _env(), str(tmp_path / 'out'), timeout_s=60)
  broken.close()


def test_child_env_names_this_process():
  assert child_process.child_env({})[child_process.PARENT_PID_ENV] == str(os.getpid())


def test_code_runs_as_python_dash_c(server, tmp_path):
  out = tmp_path / 'out'
  code = 'import sys; print(__name__, sys.argv); sys.exit("bad input")'
  child = server.start(['-c', code, 'x'], _env(), str(out))
  assert child.wait(timeout=60) == 1
  assert out.read_text() == "__main__ ['-c', 'x']\nbad input\n"


def test_a_script_runs_as_python_script_py(server, tmp_path):
  out = tmp_path / 'out'
  child = server.start([os.path.join(HERE, 'forked_target.py'), '0'],
                       dict(os.environ, PYTHONPATH=REPO), str(out), cwd=str(tmp_path))
  assert child.wait(timeout=60) == 0
  report = json.loads(out.read_text().splitlines()[0])
  assert report['main'] == '__main__' and report['path_ok'], report  # its dir on the path


def test_other_interpreter_options_are_refused(server, tmp_path):
  with pytest.raises(ValueError, match='-m module'):
    server.start(['-X', 'dev'], _env(), str(tmp_path / 'out'))
