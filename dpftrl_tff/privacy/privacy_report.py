"""The privacy report of a run or a planned launch: `privacy_report.md`.

The structure is the paper's Appendix "Reporting privacy guarantees" (Xu,
Zhang et al. 2023), which follows Ponomareva et al. (2023, Sec. 5.3): the
DP setting; the DP definition instantiated (data accesses covered, final
mechanism output, unit of privacy, adjacency); the mechanism and its
parameters; the accounting (type, assumptions, formal statement); and,
when the run carried canaries, the empirical estimate beside the bound.

Every number comes from the accountant's own report (`privacy` below: the
dict of `accounting.PrivacyReport` fields that `run_privacy.privacy_spent`
and `experiments.privacy_accountant` produce); nothing is recomputed here,
so the report cannot disagree with `summary.json`. The table "Accounted
figures" is the machine-checkable part (tests parse it back).
"""

import math
from typing import Any, Dict, List, Optional

from dpftrl_tff.aggregators import registry

FILE_NAME = 'privacy_report.md'

# summary.json's key for the figures of a run whose --noise_seed fixed its
# noise: what the same run with unpredictable noise would have had. Such a
# run has no guarantee (its `privacy` is null): anyone with the seed can
# regenerate and remove the noise.
UNPREDICTABLE_NOISE_KEY = 'privacy_had_noise_been_unpredictable'

# build_git_corpus's word counts of the public text (no client's data):
# git_corpus.PUBLIC_WORD_COUNTS_NAME, named here without importing the data
# code (a test ties the two).
_PUBLIC_WORD_COUNTS = 'public.word_count'

# A planned launch's vocabulary line: what the accounting assumes.
LAUNCH_VOCABULARY = (
    'assumed fixed before the launch without the clients\' data (for '
    'example a keyboard\'s existing vocabulary). A vocabulary counted from '
    'their text would reveal which words it holds without DP, outside this '
    'guarantee.')


def vocabulary_summary(data: Optional[Dict[str, Any]]) -> Dict[str, Any]:
  """summary.json's `vocabulary`, from the run's hparams.json `data`: its
  size, its word-count file if one was given, and `counted_from_clients`.

  The model's vocabulary (which words have ids) is released with the model.
  By default it is the most frequent words of the training clients' text:
  the database directory's stackoverflow.word_count (TFF's StackOverflow,
  build_git_corpus and the generated data count their train split) or, with
  no such file, counted from the train split; `counted_from_clients` is then
  true: a data access the DP mechanism does not cover. It is null for a
  --word_counts_path file (covered only if made without the clients' data,
  which this code cannot check) and for a source not recorded.
  """
  data = data or {}
  given = data.get('word_counts_path')
  return dict(words=data.get('vocab_words'), word_counts_path=given,
              counted_from_clients=(True if data.get('database') and not given
                                    else None))


def vocabulary_line(vocabulary: Dict[str, Any]) -> str:
  """The report's vocabulary line, from summary.json's `vocabulary`."""
  words = vocabulary.get('words')
  count = f'{words:,} ' if words is not None else ''
  public = (f'for example build_git_corpus\'s {_PUBLIC_WORD_COUNTS}, '
            'counted from the public text')
  if vocabulary.get('counted_from_clients'):
    return (f'the {count}most frequent words of the training clients\' '
            'text (the database directory\'s stackoverflow.word_count, or '
            'the train split): which words it holds is released without DP, '
            'so this guarantee does not cover it. A vocabulary fixed without '
            f'the clients\' data would be covered ({public}, given as '
            '--word_counts_path).')
  path = vocabulary.get('word_counts_path')
  if path:
    return (f'the first {count}words of --word_counts_path={path}. The '
            'guarantee covers the vocabulary only if that file was made '
            f'without the clients\' data ({public}); a vocabulary counted '
            'from their text reveals which words it holds without DP.')
  return ('its source was not recorded: the guarantee covers it only if '
          f'it was fixed without the clients\' data ({public}).')


# Labels of the "Accounted figures" table, in order: (label, key, format).
FIGURES = (
    ('rounds T', 'rounds', 'd'),
    ('noise multiplier z', 'noise_multiplier', '.6g'),
    ('effective noise multiplier', 'effective_noise_multiplier', '.6g'),
    ('min separation MinS (accounted)', 'min_separation', 'd'),
    ('max participation MaxP (accounted)', 'max_participation', 'd'),
    ('sensitivity^2', 'sensitivity_squared', '.10g'),
    ('rho-zCDP', 'zcdp', '.6g'),
    ('delta', 'delta', 'g'),
    ('epsilon (PLD)', 'epsilon', '.6g'),
    ('epsilon (closed form from rho)', 'epsilon_closed_form', '.6g'),
)


def number(value: Any, fmt: str) -> str:
  """`value` in `fmt`; None as '-', a non-finite float as 'nan' / 'inf'."""
  if value is None:
    return '-'
  if isinstance(value, float) and not math.isfinite(value):
    return 'nan' if math.isnan(value) else ('inf' if value > 0 else '-inf')
  return format(value, fmt)


def figures_table(privacy: Dict[str, Any]) -> List[str]:
  lines = ['| quantity | value |', '| --- | --- |']
  for label, key, fmt in FIGURES:
    if key in privacy:
      lines.append(f'| {label} | {number(privacy[key], fmt)} |')
  return lines


def parse_figures(text: str) -> Dict[str, str]:
  """The "Accounted figures" table of a report, label -> printed value."""
  labels = {label for label, _, _ in FIGURES}
  out = {}
  for line in text.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) == 2 and cells[0] in labels:
      out[cells[0]] = cells[1]
  return out


def _mechanism_lines(privacy, clipping: str) -> List[str]:
  noise = registry.noise_description(privacy).report(privacy)
  lines = [f'- Noise: {noise}', f'- Clipping: {clipping}']
  if privacy.get('value_noise_multiplier') is not None:
    lines.append(
        '- Adaptive clipping (Andrew et al. 2021; the paper\'s Algorithm 1): '
        f'clipped-count noise sigma_b = {privacy["clipped_count_stddev"]:g}, '
        f'value noise z_Delta = {privacy["value_noise_multiplier"]:.6g}; '
        'accounted as one Gaussian mechanism of the equivalent z (Theorem 1 '
        'of Andrew et al.).')
  secagg = privacy.get('secagg')
  if secagg:
    lines.append(
        f'- SecAgg-style discretization (Kairouz et al. 2021b): scale s = '
        f'{secagg["scale"]:g}, model dimension {secagg["model_dim"]} '
        f'(padded {secagg["padded_dim"]}), C = {secagg["clip_norm"]:g} '
        f'inflated to C_inflated = {secagg["inflated_clip_norm"]:.6g} by '
        'randomized rounding; the accounting uses C_inflated, so the '
        'effective noise multiplier is z C / C_inflated. The simulation '
        'rounds and sums in the modular field; it does not run the '
        'cryptographic protocol.')
  return lines


def render(privacy: Optional[Dict[str, Any]], *, subject: str,
           participation: str, clipping: str, released: str,
           kind: str = 'run',
           launch_equivalent: Optional[Dict[str, Any]] = None,
           empirical: Optional[Dict[str, Any]] = None,
           fixed_noise_seed: Optional[int] = None,
           vocabulary: Optional[str] = None) -> str:
  """The report as Markdown.

  Args:
    privacy: the accountant's figures (PrivacyReport fields); None for a run
      without DP noise, whose report says that it has no guarantee.
    subject: what is reported on ("run <dir>" or "planned launch").
    participation: how MinS and MaxP were enforced and what was observed.
    clipping: the clip norm in words (fixed C, or adaptive from C_0).
    released: what the run writes out (weights, metrics).
    kind: 'run' (a run's own guarantee) or 'launch' (a planned one).
    launch_equivalent: the launch this simulation stands for (labelled, not
      the run's guarantee), or None.
    empirical: the canary estimate (`empirical_privacy` of summary.json),
      or None.
    fixed_noise_seed: the run's --noise_seed, when it fixed the noise: the
      report then states no guarantee and labels `privacy` as what the same
      run with unpredictable noise would have had.
    vocabulary: where the model's vocabulary came from and whether the
      guarantee covers it (`vocabulary_line`); None when no vocabulary is
      released (a mechanism audit). A planned launch states its assumption.
  """
  lines = [f'# Privacy report: {subject}', '']
  if privacy is None:
    lines += [
        'No differential privacy guarantee: this run adds no DP noise '
        '(noise multiplier 0 or a non-DP aggregator). Nothing below the '
        'data\'s own sensitivity protects its clients.', '']
    return '\n'.join(lines)
  if fixed_noise_seed is not None:
    lines += [
        f'**No differential privacy guarantee.** --noise_seed='
        f'{fixed_noise_seed} fixed this run\'s DP noise: anyone who knows '
        'the seed can regenerate the noise and remove it. Runs with a fixed '
        'noise seed are for tests and debugging. The figures below are what '
        'the same run would have had with unpredictable noise (the default); '
        'they are not this run\'s guarantee.', '']
  if vocabulary is None and kind == 'launch':
    vocabulary = LAUNCH_VOCABULARY
  lines += _setting_lines(kind, released, vocabulary)
  lines += _mechanism_lines(privacy, clipping)
  lines += _accounting_lines(privacy, participation, kind,
                             fixed_noise_seed is not None)
  if launch_equivalent:
    lines += _launch_equivalent_lines(launch_equivalent)
  lines += ['', '## 5. Empirical privacy', '']
  if empirical:
    lines += empirical_lines(empirical)
  else:
    lines.append('Not measured for this report (no canaries).')
  lines += [
      '', '## 6. Transparency', '',
      'Code: this repository (dpftrl_tff), on TensorFlow Federated and '
      'TensorFlow Privacy; '
      + ('the run\'s hparams.json records the command, the commit and the '
         'package versions.' if kind == 'run' else
         'computed by experiments.privacy_accountant with the flags given.'),
      '']
  return '\n'.join(lines)


def _setting_lines(kind: str, released: str,
                   vocabulary: Optional[str]) -> List[str]:
  """Sections 1 and 2: the DP setting and the definition, instantiated."""
  vocabulary_lines = [f'- Vocabulary: {vocabulary}'] if vocabulary else []
  return [
      'Structure: the paper\'s appendix "Reporting privacy guarantees", '
      'after Ponomareva et al. (2023, Sec. 5.3).', '',
      '## 1. DP setting', '',
      f'Central DP: the server{" (here, the simulation)" if kind == "run" else ""} is trusted to clip, '
      'add the noise and release only the noisy aggregate, as specified '
      'below.', '',
      '## 2. The DP definition, instantiated', '',
      f'- Data accesses covered: every training round of this {kind}, for every '
      'well-behaved client (one that follows the algorithm, including its '
      'participation limits). Not covered: hyperparameter tuning, the '
      'evaluation metrics (computed without noise on held-out clients\' '
      'data) and the choice of a checkpoint by them, repeated runs, and the '
      'public data used for pretraining (not private).',
      *vocabulary_lines,
      f'- Final mechanism output: {released} The mechanism\'s output is the '
      'whole sequence of noisy aggregates, so every intermediate model is '
      'covered too.',
      '- Unit of privacy: the device (one client: all of its data, of any '
      'size). For a user with one device this is user-level DP.'
      + ('' if kind == 'launch' or vocabulary is None else
         ' In a simulation the client is the data\'s: a StackOverflow user '
         'or, in a build_git_corpus corpus, a git author by e-mail after '
         '.mailmap (one person committing under two e-mails is two '
         'clients).'),
      '- Adjacency: zero-out (Kairouz et al. 2021): a neighbouring dataset '
      'replaces one client\'s update by the zero vector in every round it '
      'took part in.', '',
      '## 3. Mechanism and parameters', '',
  ]


def _accounting_lines(privacy: Dict[str, Any], participation: str,
                      kind: str, fixed_noise_seed: bool = False
                      ) -> List[str]:
  """Section 4: the accounting, its figures and the formal statement."""
  noise = registry.noise_description(privacy)
  own = noise.accounting_section(privacy, participation=participation,
                                 kind=kind)
  if own is not None:
    lines, statement = own
  else:
    eps = number(privacy['epsilon'], '.6g')
    rho = number(privacy['zcdp'], '.6g')
    delta = number(privacy['delta'], 'g')
    lines = [
        '- Type: rho-zCDP (Bun and Steinke 2016) from the '
        + noise.sensitivity_source(privacy)
        + ' epsilon: PLD accounting (dp_accounting) of '
        'the Gaussian mechanism with that rho, at the delta below; the '
        'closed form rho + 2 sqrt(rho log(1/delta)) beside it is looser.',
        f'- Assumptions: {participation}',
    ]
    statement = (
        f'Every model released by this {kind} satisfies {rho}-zCDP, hence '
        f'({eps}, {delta})-DP, at the device level under zero-out adjacency, '
        f'provided that no device took part more than '
        f'{privacy["max_participation"]} times and never twice with fewer '
        f'than {privacy["min_separation"]} rounds between.')
  return (['', '## 4. Privacy accounting', ''] + lines +
          _figures_and_statement(privacy, fixed_noise_seed, statement))


def _figures_and_statement(privacy, fixed_noise_seed: bool,
                           statement: str) -> List[str]:
  """The accounted figures and the formal statement (none with a fixed
  --noise_seed)."""
  lines = ['', '### Accounted figures' + (
      ' (had the noise been unpredictable; NOT this run\'s)'
      if fixed_noise_seed else ''), '']
  lines += figures_table(privacy)
  if fixed_noise_seed:
    statement = ('None: the noise was fixed by --noise_seed (see the top of '
                 'this report). With unpredictable noise, the figures above '
                 'would have been this run\'s guarantee.')
  return lines + ['', '### Formal statement', '', statement]


def _launch_equivalent_lines(le: Dict[str, Any]) -> List[str]:
  """The launch a simulation stands for, labelled as not its guarantee."""
  text = registry.noise_description(le).launch_equivalent_text(le)
  if text is None:
    text = (
        f'A launch with report goal {le["report_goal"]} and the same noise '
        f'per client (z = {number(le["noise_multiplier"], ".6g")}), '
        f'population {le["population"]} (MinS at most '
        f'{le["population_min_separation"]}), T = {le["rounds"]}, MinS '
        f'{le["min_separation"]}, worst-case MaxP {le["max_participation"]}: '
        f'rho-zCDP {number(le["zcdp"], ".6g")}, epsilon '
        f'{number(le["epsilon"], ".6g")} at delta {number(le["delta"], "g")}.'
        ' This is what the simulation\'s noise per client would give at '
        'launch scale (paper Sec. 2.2), not a property of this run.')
  return ['', '### Launch-equivalent figure (NOT this run\'s guarantee)', '',
          text]


def empirical_verdict(block: Dict[str, Any],
                      accounted_epsilon: Optional[float]) -> str:
  """An empirical estimate against the bound, judged by its interval: a
  point above the bound whose interval reaches below it is the estimate's
  noise, not a breach."""
  if accounted_epsilon is None:
    return 'no bound to compare with (no DP noise)'
  low, high = (block.get('epsilon_interval') or [None, None])[:2]
  if low is None or not math.isfinite(low):
    return 'not judged: no interval'
  if low > accounted_epsilon:
    return (f'ABOVE the bound: the whole interval lies above the accounted '
            f'epsilon {accounted_epsilon:.4g}; the mechanism or its '
            'accounting may be broken')
  if high is not None and math.isfinite(high) and high < accounted_epsilon:
    return f'below the accounted epsilon {accounted_epsilon:.4g}'
  return (f'consistent with the accounted epsilon {accounted_epsilon:.4g} '
          '(the interval contains it)')


def empirical_lines(empirical: Dict[str, Any]) -> List[str]:
  """The canary estimate, labelled as an estimate, not a bound."""
  if 'not_estimated' in empirical:
    return [f'The run had {empirical.get("canaries")} canaries but no '
            f'estimate: {empirical.get("not_estimated")}']
  interval = empirical.get('epsilon_interval') or [None, None]
  return [
      f'One-shot empirical estimate (Andrew et al. 2024; '
      f'{empirical.get("threat_model", "final model")}): epsilon '
      f'{number(empirical.get("empirical_epsilon"), ".4g")}, '
      f'{int(100 * empirical.get("confidence", 0.95))}% interval '
      f'[{number(interval[0], ".4g")}, {number(interval[1], ".4g")}] '
      f'({empirical.get("interval_method", "bootstrap")}), from '
      f'{empirical.get("seen_canaries")} inserted and '
      f'{empirical.get("unseen_canaries")} unseen canaries at delta '
      f'{number(empirical.get("delta"), "g")} (estimator '
      f'{empirical.get("estimator", "fitted_uncorrected")}). An estimate of '
      'what an attacker of this kind can infer, not a guarantee: it is '
      'expected to lie below the accounted epsilon. Judged by its interval: '
      + empirical_verdict(empirical, empirical.get('accounted_epsilon'))
      + '.'] + _all_iterates_lines(empirical) + ['', POWER]


# What the audits can catch, as measured (docs/empirical_privacy.md,
# `benchmarks/audit_power.py` and the tiny-training table).
POWER = (
    'How much an audit can catch (measured, docs/empirical_privacy.md): '
    'a mechanism audit with 200 canaries (d = 5000, tree, z = 1, 250 of 300 '
    'clients a round) caught a noise cut to a quarter in every audit of up '
    'to 4 rounds (accounted epsilon up to 36) and in none from 5 rounds on '
    '(accounted 37 and more: the broken noise\'s estimates stayed near 40); '
    'inside a tiny training run (26 to 100 canaries seen) it was caught at '
    'none of 1, 4 and 16 rounds. Where the accounted epsilon is beyond what '
    'the canaries can show, a verdict of "consistent" or "below" is no '
    'evidence that the noise is right.')


def _all_iterates_lines(empirical: Dict[str, Any]) -> List[str]:
  block = empirical.get('all_iterates')
  if not block:
    return []
  low, high = block.get('epsilon_interval') or [None, None]
  return [
      '', f'The same canaries, {block.get("threat_model")}: epsilon '
      f'{number(block.get("empirical_epsilon"), ".4g")}, '
      f'{int(100 * block.get("confidence", 0.95))}% interval '
      f'[{number(low, ".4g")}, {number(high, ".4g")}]; judged by its '
      'interval: ' + empirical_verdict(block,
                                       empirical.get('accounted_epsilon'))
      + '.']


def participation_text(summary: Dict[str, Any], privacy: Dict[str, Any]
                       ) -> str:
  """How a run's MinS and MaxP came about, in words."""
  part = summary.get('participation') or {}
  model = part.get('model', 'uniform')
  observed_min_sep = privacy.get('observed_min_separation')
  observed = (f'observed in this run: MaxP '
              f'{privacy.get("observed_max_participation")}, MinS '
              + ('none (no client took part twice)' if observed_min_sep == -1
                 else f'{observed_min_sep}'))
  own = registry.noise_description(privacy).participation_sentence(
      privacy, observed)
  if own is not None:
    return own
  if model == 'min_sep_groups':
    planned = privacy.get('planned') or {}
    return (f'min_sep_groups participation: the clients are split into '
            f'{part.get("num_groups")} fixed groups that take part in turn, '
            f'so MinS >= {planned.get("guaranteed_min_separation")} and MaxP '
            f'<= {planned.get("max_participation")} hold by construction '
            f'(planned: rho-zCDP {number(planned.get("zcdp"), ".6g")}, '
            f'epsilon {number(planned.get("epsilon"), ".6g")}); {observed}. '
            'The figures below use the observed values.')
  if model == 'timer':
    return ('timer participation (a device checks in at most once per '
            f'timer period of {part.get("timer_hours")} h, paper Sec. 2.1): '
            'the timer bounds MinS only at full speed, so nothing is '
            f'planned; {observed}. The figures below use the observed '
            'values, which hold for this run\'s realised schedule.')
  return (f'{model} sampling of each round\'s cohort enforces no '
          f'separation; {observed}. The figures below use the observed '
          'values: they hold for this realised, data-independent schedule, '
          'not for a re-run, which would draw another one.')


def clipping_text(config) -> str:
  """The clip norm of a run in words (duck-typed TrainConfig): the
  mechanism's own description."""
  return registry.get(config.aggregator).describe_clipping(config)


def for_run(summary: Dict[str, Any], config, run_path: str) -> str:
  """The report of a finished (or stopped) training run."""
  hypothetical = summary.get(UNPREDICTABLE_NOISE_KEY)
  privacy = summary.get('privacy') or hypothetical
  return render(
      privacy, subject=f'run {run_path}',
      fixed_noise_seed=hypothetical['noise_seed'] if hypothetical else None,
      participation=(participation_text(summary, privacy)
                     if privacy else ''),
      clipping=clipping_text(config),
      released=(f'the model weights after each of the {summary["rounds"]} '
                'rounds (each is sent to the next cohort; '
                'final_weights.npz and checkpoints/ hold the last ones).'),
      launch_equivalent=(privacy or {}).get('launch_equivalent'),
      empirical=summary.get('empirical_privacy'),
      vocabulary=vocabulary_line(summary.get('vocabulary') or {}))
