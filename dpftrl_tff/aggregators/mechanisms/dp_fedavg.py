"""dp_fedavg: DP-FedAvg with Poisson sampling (McMahan et al. 2018), the
baseline every DP federated learning paper compares against.

Every client takes part in each round independently with probability
q = m / N (`--participation=poisson`, required), its update clipped to C;
the server adds Gaussian noise of std z C to the round's clipped sum and
divides by the report goal m (not by the varying cohort size, so one
client's influence stays C / m). The noise is BandMF's with C = I (one
band: an independent N(0, z^2 C^2) draw every round from the seeded
stateless stream, `aggregators.bandmf`). Its privacy is the
Poisson-subsampled Gaussian composed T times, by dp_accounting's PLD
accountant (`accounting.sampled_gaussian`): far smaller than DP-FTRL's at
the same z, but it ASSUMES the sampling, which a production system cannot
guarantee (the paper, Sec. 2.1); every report says so. The amplification
also needs who was sampled to be unpredictable: the sampling is seeded by a
secret drawn from the operating system when the run starts
(`sampling_seed`), not by --seed.
"""

import dataclasses
from typing import Optional

import numpy as np

from dpftrl_tff import accounting
from dpftrl_tff import checks
from dpftrl_tff import settings
from dpftrl_tff.accounting import sampled_gaussian
from dpftrl_tff.aggregators.mechanisms import base

# Refused when a run of T rounds would draw an empty round (which stops it:
# TFF runs no round without clients) with more than this probability.
MAX_EMPTY_ROUND_RISK = 0.01


@dataclasses.dataclass(frozen=True)
class DPFedAvgSettings:
  """DP-FedAvg's sampling rate, carried by `TrainConfig` and the
  accountant's flags."""
  sampling_probability: Optional[float] = settings.setting(
      None, 'dp_fedavg: Poisson sampling rate q of the accounting. Training '
      'samples at clients_per_round / N for its N training clients (unset: '
      'that; given: must equal it); the accountant requires it.')


def _validate(config):
  base.check_fixed_clip_dp(config)
  if config.participation != 'poisson':
    raise ValueError(
        f'--aggregator=dp_fedavg is accounted for Poisson sampling: use '
        f'--participation=poisson, not {config.participation} (a fixed '
        f'cohort is not what its privacy amplification covers).')
  q = config.dp_fedavg_settings().sampling_probability
  if q is not None:
    sampled_gaussian.check_sampling_probability(q)
  base.check_secagg(config, 'dp_fedavg', False)
  base.check_no_other_settings(config, 'dp_fedavg')


def sampling_seed(noise_seed: Optional[int]) -> int:
  """The seed of the Poisson sampling: 62 bits from the operating system,
  or, with a fixed --noise_seed (no guarantee anyway), derived from it so
  that such a run repeats."""
  # TensorFlow Federated only through dp_ftrl; these run when a run starts.
  from dpftrl_tff.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  if noise_seed is None:
    return dp_ftrl.resolve_noise_seed(None)
  return dp_ftrl.derived_noise_seed(noise_seed, 'poisson_sampling')


class DPFedAvgRunParameters(base.RunParameters):
  """The sampling rate a run plans: q = m / N for its N training clients."""
  file_name = 'dp_fedavg.json'

  def plan(self, config, num_clients: int):
    """q = m / N, checked against a given --sampling_probability; refuses a
    run likely to draw an empty round. Also the secret seed of the Poisson
    sampling (`sampling_seed`): a resumed run reads its own back
    (`restore`)."""
    from dpftrl_tff.participation import poisson  # pylint: disable=g-import-not-at-top
    q = config.clients_per_round / num_clients
    given = config.dp_fedavg_settings().sampling_probability
    if given is not None and abs(given - q) > 1e-12 * q:
      raise ValueError(
          f'--sampling_probability={given}: training samples at '
          f'--clients_per_round / N = {config.clients_per_round} / '
          f'{num_clients} = {q:.6g}; leave it unset or give that.')
    risk = config.total_rounds * poisson.empty_round_probability(
        num_clients, config.clients_per_round)
    if risk > MAX_EMPTY_ROUND_RISK:
      raise ValueError(
          f'--clients_per_round={config.clients_per_round}: Poisson sampling '
          f'of {num_clients} clients at q = {q:.4g} draws no client in some '
          f'round of {config.total_rounds} with probability up to '
          f'{risk:.2g} (a round without clients stops the run); use a larger '
          f'--clients_per_round.')
    return dataclasses.replace(
        config, sampling_probability=q,
        resolved_sampling_seed=(config.resolved_sampling_seed
                                if config.resolved_sampling_seed is not None
                                else sampling_seed(config.noise_seed)))

  def restore(self, config, saved, path):
    """The run's own sampling seed (plan() recomputes q from the same
    data)."""
    del path
    return dataclasses.replace(config,
                               resolved_sampling_seed=saved['sampling_seed'])

  def contents(self, config):
    """q, the assumption, and the sampling seed: in the run directory, as
    the noise seed is in its checkpoints; never in hparams.json or logs."""
    return dict(sampling_probability=config.dp_fedavg_settings()
                .sampling_probability, assumption=sampled_gaussian.ASSUMPTION,
                sampling_seed=config.resolved_sampling_seed)

  def describe(self, config, path):
    return (f'DP-FedAvg with Poisson sampling at q = '
            f'{config.dp_fedavg_settings().sampling_probability:.6g} (in '
            f'{path}); its privacy {sampled_gaussian.ASSUMPTION}.')


def _factory(config, record_specs):
  from dpftrl_tff.aggregators import bandmf  # pylint: disable=g-import-not-at-top
  # Independent noise every round: the matrix mechanism with C = I, given
  # as its one band (a dense T x T identity is 80 GB at T = 100,000).
  return base.fixed_clip_factory(
      bandmf.build_dp_ftrl_bandmf_factory, config, record_specs,
      band=np.ones((config.total_rounds, 1)))


def _privacy(config, rounds, max_participation, min_separation):
  if config.noise_multiplier <= 0:
    return None
  q = config.dp_fedavg_settings().sampling_probability
  if q is None:
    raise ValueError('--aggregator=dp_fedavg needs --sampling_probability '
                     '(training plans it as clients_per_round / N).')
  return accounting.compute_privacy(
      rounds=rounds, noise_multiplier=config.noise_multiplier,
      max_participation=max_participation, min_separation=min_separation,
      sampling_probability=q)


class PoissonGaussianNoise(base.NoiseDescription):
  """Independent Gaussian noise every round under Poisson sampling
  (McMahan et al. 2018): the noise of dp_fedavg. Its accounting is not
  zCDP: it gives the reports' and the accountant's accounting texts itself,
  from the privacy dict's 'poisson' block."""
  name = sampled_gaussian.MECHANISM

  def report(self, privacy):
    q = privacy['poisson']['sampling_probability']
    return ('DP-FedAvg (McMahan et al. 2018): independent Gaussian noise '
            f'of std z C on every round\'s clipped sum, z = '
            f'{privacy["noise_multiplier"]:g}, divided by the report goal; '
            f'clients sampled by Poisson sampling at q = {q:.6g}.')

  def console(self, privacy):
    del privacy
    return 'DP-FedAvg, independent noise each round'

  # Its accounting in the reports' words: PLD of the Poisson-subsampled
  # Gaussian mechanism, no zCDP figure, MinS and MaxP not entering.

  def accounting_section(self, privacy, *, participation, kind):
    p = privacy['poisson']
    eps = base.number(privacy['epsilon'], '.6g')
    delta = base.number(privacy['delta'], 'g')
    lines = [
        '- Type: (epsilon, delta)-DP by dp_accounting\'s PLD accountant of '
        'the Poisson-subsampled Gaussian mechanism (sensitivity C, noise '
        f'z C, rate q = {p["sampling_probability"]:.6g}) composed over the '
        f'{privacy["rounds"]} rounds; RDP gives epsilon '
        f'{base.number(p["epsilon_rdp"], ".6g")} (looser). No rho-zCDP '
        'figure: the amplification by sampling does not show in zCDP.',
        f'- Assumptions: the accounting {p["assumption"]}. {participation}',
    ]
    statement = (
        f'Every model released by this {kind} satisfies ({eps}, {delta})-DP '
        'at the device level (a client zeroed out is one not sampled: '
        'add/remove adjacency, as dp_accounting accounts it), provided that '
        'every client took part in each round independently with '
        f'probability {p["sampling_probability"]:.6g} and in no other way.')
    return lines, statement

  def launch_equivalent_text(self, launch):
    return (
        f'A launch with report goal {launch["report_goal"]} and the same '
        f'noise per client (z = '
        f'{base.number(launch["noise_multiplier"], ".6g")}), population '
        f'{launch["population"]} Poisson-sampled at q = '
        f'{launch["poisson"]["sampling_probability"]:.6g}, T = '
        f'{launch["rounds"]}: epsilon {base.number(launch["epsilon"], ".6g")}'
        f' at delta {base.number(launch["delta"], "g")}, if the launch could '
        'guarantee that sampling (the paper, Sec. 2.1: a production system '
        'cannot).')

  def participation_sentence(self, privacy, observed):
    return ('This simulation samples that way (--participation=poisson, '
            f'q = {privacy["poisson"]["sampling_probability"]:.6g}); MinS and '
            f'MaxP do not enter the accounting ({observed}).')

  def figures_phrase(self, privacy):
    return (f'epsilon {base.number(privacy["epsilon"], ".3f")} (Poisson '
            'sampling at q = '
            f'{privacy["poisson"]["sampling_probability"]:.4g}, assumed)')

  def launch_participation_phrase(self, launch):
    return f'T={launch["rounds"]}'

  def accountant_printout(self, report):
    p = report['poisson']
    return [
        'DP-FedAvg privacy, Poisson sampling',
        f'  rounds T                : {report["rounds"]}',
        f'  noise multiplier z      : {report["noise_multiplier"]:g}',
        f'  sampling probability q  : {p["sampling_probability"]:.6g}',
        f'  epsilon (PLD)           : {report["epsilon"]:.4f} at delta = '
        f'{report["delta"]:g}',
        f'  epsilon (RDP, looser)   : {p["epsilon_rdp"]:.4f}',
        f'  It {p["assumption"]}; MinS and MaxP do not enter. No zCDP '
        'figure: the amplification by sampling does not show in rho.',
    ]

  def launch_report_texts(self, report):
    q = report['poisson']['sampling_probability']
    return dict(
        participation=(f'Every device must take part in each round '
                       f'independently with probability {q:.6g}; the '
                       'paper (Sec. 2.1) explains why a production system '
                       'cannot guarantee this.'),
        clipping=('a fixed l2 clip norm C per client update (the accounting '
                  'does not depend on its value).'),
        released=(f'the model weights after each of the {report["rounds"]} '
                  'rounds.'))


def _launch_config(config, population: int):
  """The launch's q: its report goal over its population."""
  return dataclasses.replace(
      config, sampling_probability=checks.check_float(
          config.clients_per_round / population, '--launch_population',
          minimum=0, strict_minimum=True, maximum=1))


MECHANISM = base.Mechanism(
    name='dp_fedavg',
    description='DP-FedAvg: fixed clip C, independent Gaussian noise each '
    'round, Poisson sampling (--participation=poisson) assumed by its '
    'accounting',
    validate=_validate, build_factory=_factory, privacy=_privacy,
    initial_clip=lambda config: config.clip_norm, supports_secagg=False,
    describe_clipping=base.fixed_clip_text,
    noise=PoissonGaussianNoise(),
    run_parameters=DPFedAvgRunParameters(), participation='poisson',
    launch_config=_launch_config)
