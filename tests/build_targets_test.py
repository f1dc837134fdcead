"""Every library module, binary and test file has a Bazel target in BUILD."""

import ast
import os
import pathlib

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _build_targets():
  """Parses BUILD (Starlark is Python syntax) into {rule: [srcs...]}."""
  tree = ast.parse((ROOT / 'BUILD').read_text())
  targets = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
      kwargs = {k.arg: k.value for k in node.keywords}
      if 'srcs' not in kwargs:
        continue
      srcs = ast.literal_eval(kwargs['srcs'])
      name = ast.literal_eval(kwargs['name'])
      targets[name] = (node.func.id, srcs)
  return targets


class BuildTargetsTest(absltest.TestCase):

  def test_every_python_file_has_a_target(self):
    covered = {}
    for rule, srcs in _build_targets().values():
      for src in srcs:
        covered[src] = rule
    expected_rule = {'dpftrl_tff': 'py_library', 'experiments': 'py_binary',
                     'benchmarks': 'py_binary', 'tests': 'py_test'}
    missing = []
    for folder, rule in expected_rule.items():
      for path in sorted((ROOT / folder).rglob('*.py')):
        rel = os.path.relpath(path, ROOT)
        if path.name == '__init__.py' and folder not in ('dpftrl_tff',
                                                         'tests'):
          continue
        if path.name in ('conftest.py', 'fixtures.py'):
          rule_here = 'py_library'
        else:
          rule_here = rule
        if (folder == 'dpftrl_tff' or path.name == '__init__.py' or
            rel.startswith(os.path.join('tests', 'reference'))):
          rule_here = 'py_library'   # Library code, or the tests' oracles.
        text = path.read_text()
        if rule == 'py_binary' and 'app.run(' not in text and (
            'run_app(' not in text):
          rule_here = 'py_library'   # A helper module of the binaries.
        if covered.get(rel) != rule_here:
          missing.append(f'{rel} (needs a {rule_here})')
    self.assertEmpty(missing, 'Files without a BUILD target: ' +
                     ', '.join(missing))

  def test_targets_point_at_existing_files(self):
    for name, (_, srcs) in _build_targets().items():
      for src in srcs:
        self.assertTrue((ROOT / src).exists(), f'{name}: {src} missing')


if __name__ == '__main__':
  absltest.main()
