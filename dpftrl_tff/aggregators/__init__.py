"""Aggregation factories for the model updates (one family per module)."""
