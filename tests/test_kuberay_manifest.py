"""deploy/kuberay/raycluster.yaml: a RayCluster whose Ray version, custom resources and
shared job directory agree with setup.py and the launch command it documents."""
import json
import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = os.path.join(REPO, 'deploy', 'kuberay', 'raycluster.yaml')


def _documents():
  with open(MANIFEST) as f:
    return list(yaml.safe_load_all(f))


def _resources(group):
  # KubeRay passes rayStartParams as strings: '"{...}"' is a quoted JSON object.
  return json.loads(json.loads(group['rayStartParams']['resources']))


def test_the_manifest_is_a_ray_cluster_of_the_pinned_ray():
  cluster, claim = _documents()
  assert (cluster['apiVersion'], cluster['kind']) == ('ray.io/v1', 'RayCluster')
  with open(os.path.join(REPO, 'setup.py')) as f:
    pinned = re.search(r"RAY = \['ray==([\d.]+)'\]", f.read()).group(1)
  assert cluster['spec']['rayVersion'] == pinned
  assert cluster['spec']['authOptions'] == {'mode': 'token'}  # clients must hold the token
  assert claim['kind'] == 'PersistentVolumeClaim'
  assert claim['spec']['accessModes'] == ['ReadWriteMany']


def test_head_and_workers_carry_the_resources_the_launch_command_places_by():
  cluster, claim = _documents()
  spec = cluster['spec']
  assert _resources(spec['headGroupSpec']) == {'tfrl_server': 10}
  assert [_resources(g) for g in spec['workerGroupSpecs']] == [{'tfrl_actors': 10}]
  with open(MANIFEST) as f:  # the command in the header comment, '#'s removed
    command = ''.join(line.lstrip('#') for line in f if line.startswith('#'))
  placed = json.loads(re.search(r"--ray_resources='(\{.*?\})'", command, re.S).group(1))
  assert placed == {'reverb_server': {'tfrl_server': 1}, 'train': {'tfrl_server': 1},
                    'eval': {'tfrl_server': 1}, 'collect': {'tfrl_actors': 1}}
  # Every pod mounts the shared job directory where --root_dir points.
  pods = [spec['headGroupSpec']['template']] + [
      g['template'] for g in spec['workerGroupSpecs']]
  for pod in pods:
    mounts = {m['mountPath'] for c in pod['spec']['containers'] for m in c['volumeMounts']}
    claims = {v['persistentVolumeClaim']['claimName'] for v in pod['spec']['volumes']}
    assert '/runs' in mounts and claims == {claim['metadata']['name']}
  assert '--root_dir=/runs/' in command


def test_the_image_installs_tfrl_from_a_clone():
  """The Dockerfile lines the manifest gives copy the reader's clone into the image and
  install it with extras setup.py defines (ray among them); no repository URL."""
  with open(MANIFEST) as f:
    text = f.read()
  comments = '\n'.join(line.strip().lstrip('#').strip() for line in text.splitlines()
                       if line.strip().startswith('#'))
  copied = re.search(r'^COPY (?:--chown=\S+ )?\. (/\S+)$', comments, re.M)
  assert copied, comments
  installed = re.search(r'^RUN pip install "(/[^"\[]+)\[([\w,]+)\]"$', comments, re.M)
  assert installed and installed.group(1) == copied.group(1), comments
  with open(os.path.join(REPO, 'setup.py')) as f:
    setup = f.read()
  extras = installed.group(2).split(',')
  assert 'ray' in extras and all(f"'{extra}'" in setup for extra in extras), extras
  assert 'git+' not in text and 'github.com' not in text and 'tfrl-dev' not in text
