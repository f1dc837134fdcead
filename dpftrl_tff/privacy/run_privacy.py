"""The privacy a run spent, from its own participation log (observed MinS
and MaxP), the privacy its participation model guarantees, and the labelled
launch-equivalent privacy (paper Sec. 2.2), as summary.json dicts."""

import dataclasses
from typing import Dict, List, Optional

from dpftrl_tff import accounting
from dpftrl_tff import participation
from dpftrl_tff.aggregators import registry
from dpftrl_tff.privacy import privacy_report
from dpftrl_tff.run import config as config_lib

TrainConfig = config_lib.TrainConfig

UNPREDICTABLE_NOISE_KEY = privacy_report.UNPREDICTABLE_NOISE_KEY


def start_warnings(config: TrainConfig) -> List[str]:
  """What a run must say before it starts about privacy it will not have:
  a fixed --noise_seed (the noise is predictable), or a mechanism that
  clips without noise (z = 0: no guarantee at all)."""
  warnings = []
  if config.noise_seed is not None:
    warnings.append(
        f'--noise_seed={config.noise_seed} fixes the DP noise: it is '
        'predictable and the run gives no privacy (tests and debugging '
        'only).')
  mechanism = registry.get(config.aggregator)
  if (config.noise_multiplier == 0 and
      mechanism.initial_clip(config) is not None):
    warnings.append(
        f'--aggregator={config.aggregator} with --noise_multiplier=0 clips '
        'the updates but adds no DP noise: this run trains without noise '
        'and has no privacy guarantee.')
  return warnings


def split_by_noise_seed(config: TrainConfig, figures: Optional[Dict]
                        ) -> Dict[str, Optional[Dict]]:
  """summary.json's privacy entries of a run: {'privacy': figures} when its
  noise was unpredictable; with a fixed --noise_seed {'privacy': None,
  UNPREDICTABLE_NOISE_KEY: figures with the seed}, never the run's own."""
  if config.noise_seed is None or figures is None:
    return {'privacy': figures}
  return {'privacy': None,
          UNPREDICTABLE_NOISE_KEY: dict(figures, noise_seed=config.noise_seed)}


def accounted(summary: Dict) -> Optional[Dict]:
  """The accountant's figures of a run's summary: its guarantee, or, for a
  run with a fixed --noise_seed, the labelled figures it would have had
  (for what compares against the accounting, such as the canary audit)."""
  return summary.get('privacy') or summary.get(UNPREDICTABLE_NOISE_KEY)


def privacy_dict(report, **extra):
  if report is None:
    return None
  return dict(extra, rounds=report.rounds,
              noise_multiplier=report.noise_multiplier,
              max_participation=report.max_participation,
              min_separation=report.min_separation,
              restart_rounds=list(report.restart_rounds),
              mechanism=report.mechanism, zcdp=report.zcdp,
              epsilon=report.epsilon, delta=report.delta,
              epsilon_closed_form=report.epsilon_closed_form,
              sensitivity_squared=report.sensitivity_squared,
              effective_noise_multiplier=report.effective_noise_multiplier,
              value_noise_multiplier=report.value_noise_multiplier,
              clipped_count_stddev=report.clipped_count_stddev,
              secagg=report.secagg, blt=report.blt,
              bandmf=report.bandmf, poisson=report.poisson)


def launch_equivalent_privacy(config: TrainConfig,
                              rounds: int) -> Optional[Dict]:
  """The privacy of the launch this simulation stands for (paper Sec. 2.2).

  Small simulations tune with a small report goal m and launch with a large
  one, keeping the noise per client z / m: z_launch = z * m_launch / m. With
  the launch population P the launch can reach MinS = floor(P / m_launch) - 1
  (participation at that separation, MaxP its worst case). This is NOT the
  simulation's own guarantee. None without --launch_population or noise.
  """
  if config.launch_population is None or config.noise_multiplier <= 0:
    return None
  m_launch = config.launch_report_goal
  scale = m_launch / config.clients_per_round
  launch = dataclasses.replace(
      config, noise_multiplier=config.noise_multiplier * scale,
      clients_per_round=m_launch,
      clipped_count_stddev=config.adaptive_settings().scaled_count_stddev(
          scale))
  launch_rounds = config.launch_rounds or rounds
  population_min_sep = accounting.max_min_separation(
      config.launch_population, m_launch)
  min_sep = min(population_min_sep, launch_rounds - 1)
  mechanism = registry.get(config.aggregator)
  launch = mechanism.launch_config(launch, config.launch_population)
  report = mechanism.privacy(launch, launch_rounds, None, min_sep)
  return privacy_dict(report, report_goal=m_launch,
                       population=config.launch_population,
                       population_min_separation=population_min_sep)


def privacy_spent(config: TrainConfig, rounds: int,
                  log: participation.ParticipationLog,
                  sampler: Optional[participation.Sampler] = None
                  ) -> Optional[Dict]:
  """rho-zCDP and epsilon of `rounds` rounds with the observed participation.

  MaxP and MinS are those of the run's own participation log (MinS: rounds
  strictly between two participations; no client took part twice: MaxP 1).
  Beside it: `planned`, the privacy the participation model guarantees
  (min_sep_groups), and `launch_equivalent` (see
  `launch_equivalent_privacy`).
  """
  max_p = max(1, log.max_participation)
  min_sep = log.min_separation if log.min_separation >= 0 else rounds - 1
  mechanism = registry.get(config.aggregator)
  report = mechanism.privacy(config, rounds, max_p, min(min_sep, rounds - 1))
  if report is None:
    return None
  out = privacy_dict(report, observed_max_participation=max_p,
                      observed_min_separation=log.min_separation,
                      planned=None)
  planned = sampler.planned(rounds) if sampler is not None else None
  if planned is not None:
    out['planned'] = privacy_dict(
        mechanism.privacy(config, rounds, planned['max_participation'],
                          min(planned['min_separation'], rounds - 1)),
        guaranteed_min_separation=planned['min_separation'])
  out['launch_equivalent'] = launch_equivalent_privacy(config, rounds)
  return out
