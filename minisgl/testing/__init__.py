"""Helpers for tests and course exercises: tiny deterministic checkpoints (`tiny_models`)."""
