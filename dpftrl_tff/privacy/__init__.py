"""A configuration's formal privacy: of a run, of a planned launch, and its report.

Every figure comes from the mechanism's own accounting (aggregators.registry):

  run_privacy      what a run spent, from its participation log;
  planned_privacy  a planned launch (experiments.privacy_accountant);
  privacy_report   privacy_report.md (the paper's Appendix on reporting).
"""
