"""tfrl-launch --backend=ray on a real two-node Ray cluster, on this host.

The cluster runs in a network namespace of its own (`unshare -rn`) whose only interface
is loopback: Ray advertises a node's first non-loopback address whatever
--node-ip-address says, and a test must keep its traffic on loopback. The head node
carries the custom resource 'tfrl_server' (the Reverb server, the trainer and the
evaluator ask for it), the second node 'tfrl_actors' (the collectors). The DQN job, on
two tasks at once (CartPole-v1 and v0, collector k on task k), must reach each task's
target with every program where its resources put it, a collector killed
mid-job must be reported as the local launcher reports one (and the job go on), the
exported policy must play at the target, and `ray stop` must leave nothing running.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import psutil
import pytest

from learners.configuration import config
from learners.population import population
from tfrl.metrics import format_return
from programs import CONFIRM_AT_ONCE, evaluate_export, final_state, replay_confirmation
from test_tensorboard import _tags as event_tags  # tests/learners/test_tensorboard.py

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESOURCES = {'reverb_server': {'tfrl_server': 1}, 'train': {'tfrl_server': 1},
             'eval': {'tfrl_server': 1}, 'collect': {'tfrl_actors': 1}}

# Runs inside the namespace: the cluster, the job (killing collect_1 once the trainer
# is under way), where Ray put each program, the stop. Prints JSON lines to read back.
SCRIPT = textwrap.dedent('''\
    set -u
    ip link set lo up
    export RAY_USAGE_STATS_ENABLED=0 PYTHONPATH={repo}
    RAY={ray}; PY={python}; ROOT={root}; TMP={tmp}
    trap '$RAY stop --force > /dev/null 2>&1' EXIT  # a cluster left by a failure, too
    common="--node-ip-address=127.0.0.1 --num-cpus=2 --disable-usage-stats --temp-dir=$TMP"
    $RAY start --head --port=6390 --include-dashboard=false $common \\
        --resources='{{"tfrl_server": 10}}' > $ROOT/ray_head.log 2>&1 || exit 11
    $RAY start --address=127.0.0.1:6390 $common \\
        --resources='{{"tfrl_actors": 10}}' > $ROOT/ray_worker.log 2>&1 || exit 12
    $PY -m learners.launch --backend=ray --ray_address=127.0.0.1:6390 \\
        --ray_resources='{resources}' --root_dir=$ROOT --gin_file=dqn_cartpole.gin \\
        --gin_bindings="Experiment.tasks = ('CartPole-v1', 'CartPole-v0')" \\
        --gin_bindings="Experiment.task_mode = 'multi_task'" \\
        --gin_bindings='Experiment.target_return = None' \\
        --gin_bindings='Experiment.task_target_returns = {targets}' \\
        --gin_bindings='{confirm_at_once}' \\
        --num_collectors=2 --timeout_s=600 --status_interval_s=5 > $ROOT/launch.out 2>&1 &
    launcher=$!
    # Once every program is up and collect_1 writes: kill -9 its process on its node.
    for i in $(seq 1 600); do
      grep -q 'Started eval' $ROOT/launch.out 2>/dev/null &&
        grep -q 'acting with policy version' $ROOT/logs/collect_1.log 2>/dev/null && break
      sleep 0.5
    done
    pid=$(sed -n 's/.*Started collect_1 (pid \\([0-9]*\\) .*/\\1/p' $ROOT/launch.out)
    kill -9 "$pid" && echo '{{"killed": '"$pid"'}}'
    wait $launcher; echo '{{"launch_status": '$?'}}'
    # A population of two on the 'tfrl_actors' node; member 1 killed at its first report.
    $PY -m learners.pbt --backend=ray --ray_address=127.0.0.1:6390 \\
        --ray_resources='{{"pbt_member": {{"tfrl_actors": 1}}}}' --root_dir=$ROOT/pbt_run \\
        --gin_file=ppo_cartpole.gin --population_size=2 --ready_interval=2048 \\
        --bounds=learning_rate=1e-4:1e-2,entropy_cost=0:0.02:linear \\
        {pbt_bindings} > $ROOT/pbt.out 2>&1 &
    runner=$!
    for i in $(seq 1 600); do
      [ -f $ROOT/pbt_run/pbt/member_1/report_1.json ] && break; sleep 0.5
    done
    # The pid the runner printed, not a pgrep: another test's population may run beside.
    pid=$(sed -n 's/.*Member 1 started (pid \\([0-9]*\\) .*/\\1/p' $ROOT/pbt.out | head -1)
    kill -9 "$pid" && echo '{{"member_killed": '"$pid"'}}'
    wait $runner; echo '{{"pbt_status": '$?'}}'
    $PY -c 'import json, ray; ray.init(address="127.0.0.1:6390", logging_level="ERROR"); \\
        print(json.dumps({{"nodes": {{n["NodeID"]: sorted(n["Resources"]) \\
        for n in ray.nodes() if n["Alive"]}}}}))'
    $RAY stop --force > $ROOT/ray_stop.log 2>&1; echo '{{"stop_status": '$?'}}'
    ''')


def _ray_processes():
  return [p.info['pid'] for p in psutil.process_iter(['pid', 'cmdline'])
          if any(name in ' '.join(p.info['cmdline'] or ()) for name in
                 ('raylet', 'gcs_server', 'ray::'))]


# Each task's target: well above a random policy's 22 on both, below the full 475 and
# 195 (DQN's 475 is held in test_learning.py); what the cluster adds is placement, a
# lost collector and the stop, which show at these as at the full targets.
TARGETS = {'CartPole-v1': 200.0, 'CartPole-v0': 150.0}

PBT_BINDINGS = ['Experiment.num_train_steps = 24', 'Experiment.eval_interval = 4',
                'Experiment.num_eval_episodes = 2', 'Experiment.target_return = None',
                'Experiment.checkpoint_interval = 4']


@pytest.fixture(scope='module')
def job(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp('ray_cluster')
  if shutil.which('unshare') is None or shutil.which('ip') is None:
    pytest.fail('this test needs unshare and ip (util-linux, iproute2) for its loopback-'
                'only network namespace')
  ray = os.path.join(os.path.dirname(sys.executable), 'ray')
  temp = f'/tmp/tfrl_ray_{os.getpid()}'  # Ray's socket paths must stay short
  script = SCRIPT.format(repo=REPO, ray=ray, python=sys.executable, root=tmp_path,
                         tmp=temp, resources=json.dumps(RESOURCES),
                         targets=tuple(TARGETS.values()), confirm_at_once=CONFIRM_AT_ONCE,
                         pbt_bindings=' '.join(f'--gin_bindings="{b}"' for b in PBT_BINDINGS))
  try:
    result = subprocess.run(['unshare', '-rn', 'bash', '-c', script], cwd=REPO,
                            capture_output=True, text=True, timeout=900)
  finally:
    shutil.rmtree(temp, ignore_errors=True)
  facts = {}
  for line in result.stdout.splitlines():
    if line.startswith('{'):
      facts.update(json.loads(line))
  with open(tmp_path / 'launch.out') as f:
    launched = f.read()
  return facts, launched, result, tmp_path


def test_a_job_on_a_two_node_ray_cluster(job):
  facts, launched, result, root = job
  context = f'{launched[-4000:]}\n{result.stderr[-2000:]}'
  assert facts.get('launch_status') == 0, context
  # Where Ray put each program: collectors on the 'tfrl_actors' node, the rest on the
  # 'tfrl_server' one (both nodes are 127.0.0.1: told apart by their Ray node ids).
  started = dict(re.findall(r'Started (\w+) \(pid \d+ on 127\.0\.0\.1, Ray node (\w+)\)',
                            launched))
  assert set(started) == {'reverb_server', 'train', 'collect_0', 'collect_1', 'eval'}, context
  node_of = {resource: node for node, resources in facts['nodes'].items()
             for resource in resources if resource.startswith('tfrl_')}
  assert {started['collect_0'], started['collect_1']} == {node_of['tfrl_actors']}, facts
  assert {started[n] for n in ('reverb_server', 'train', 'eval')} == {
      node_of['tfrl_server']}, facts
  # The killed collector was reported as the local launcher reports one, and the job
  # went on to its target with the other.
  assert 'killed' in facts, context
  assert re.search(r'collect_1 was killed \(SIGKILL\) \(exit status -9\); the job goes on '
                   r'with collect_0', launched), context
  assert 'Lost during the job (reported above): collect_1.' in launched, context
  # A multi-task job (CartPole-v1 and CartPole-v0, whose episodes end at 200 steps):
  # collector k on task k, every evaluation on both, the target each task's threshold.
  for task, name in enumerate(('CartPole-v1', 'CartPole-v0')):
    with open(root / 'logs' / f'collect_{task}.log') as f:
      assert f'Collector {task} steps task {task + 1} of 2, {name}.' in f.read()
  with open(root / 'eval' / 'results.json') as f:
    rows = json.load(f)
  assert all(set(row['task_returns']) == {'CartPole-v1', 'CartPole-v0'} for row in rows)
  last = rows[-1]
  assert last['reached_target'], last
  assert all(last['task_returns'][name] >= target for name, target in TARGETS.items()), last
  assert last['return'] == pytest.approx(sum(last['task_returns'].values()) / 2)
  tags = event_tags(str(root / 'eval'))
  assert tags['eval/CartPole-v0/AverageReturn'] == tags['eval/AverageReturn'] == len(rows)
  # The launcher's status line gives each task's last return after the mean.
  status = [line for line in launched.splitlines()
            if '] env steps ' in line and 'last eval return' in line][-1]
  each = last['task_returns']
  assert status.endswith(f' | CartPole-v1 {format_return(each["CartPole-v1"])} | '
                         f'CartPole-v0 {format_return(each["CartPole-v0"])}'), status
  state = final_state(str(root))
  assert set(state.values()) == {last['train_step']}, (state, last)
  config.parse(['dqn_cartpole.gin'], [CONFIRM_AT_ONCE])
  played = replay_confirmation(str(root / 'policies' / 'greedy_policy'),
                               last['confirmation_seed'])
  assert played >= TARGETS['CartPole-v1'], played
  # The cluster is gone: nothing of Ray is left running.
  assert facts.get('stop_status') == 0, context
  assert not _ray_processes(), _ray_processes()


def test_a_population_on_the_ray_cluster(job):
  """tfrl-pbt --backend=ray: members placed by their resources, a killed member
  restarted from its checkpoint on the cluster, the rounds and the best member's policy
  as on one host."""
  facts, _, result, root = job
  with open(root / 'pbt.out') as f:
    out = f.read()
  context = f'{facts}\n{out[-4000:]}\n{result.stderr[-2000:]}'
  assert facts.get('pbt_status') == 0, context
  started = re.findall(r'Member (\d) started \(pid \d+ on 127\.0\.0\.1, Ray node (\w+)\)',
                       out)
  node_of = {resource: node for node, resources in facts['nodes'].items()
             for resource in resources if resource.startswith('tfrl_')}
  assert sorted(m for m, _ in started) == ['0', '1', '1'], context  # 1 twice: a restart
  assert {node for _, node in started} == {node_of['tfrl_actors']}, (started, facts)
  assert 'member_killed' in facts, context
  events = population.read(str(root / 'pbt_run' / 'pbt' / 'lineage.jsonl'))
  assert [e['returncode'] for e in events if e['event'] == 'restart'] == [-9], events
  assert {e['round'] for e in events if e['event'] == 'ready'} >= {1, 2}, events
  assert sorted(e['member'] for e in events if e['event'] == 'end') == [0, 1]
  with open(root / 'pbt_run' / 'pbt' / 'member_1.log') as f:
    assert 'Restored ' in f.read()  # the restarted member went on from its checkpoint
  with open(root / 'pbt_run' / 'pbt' / 'best.json') as f:
    best = json.load(f)
  assert best['best_member'] in (0, 1) and f"Best member: {best['best_member']}" in out
  config.parse(['ppo_cartpole.gin'], PBT_BINDINGS)
  assert evaluate_export(best['greedy_policy_dir'], seed=0) > 0  # loads and plays
