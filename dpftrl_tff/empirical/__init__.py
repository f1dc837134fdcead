"""Empirical privacy: canaries, the one-shot estimate, audits and exposure.

  probes             what a run inserts to measure its privacy;
  canaries           canary clients inside training;
  empirical_privacy  the one-shot estimate from canary cosines (Andrew et al.);
  canary_audit       a canary audit of a mechanism alone;
  exposure           the secret sharer's exposure (Carlini et al.).
"""
