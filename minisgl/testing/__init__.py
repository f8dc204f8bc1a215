"""Helpers for tests and course exercises: tiny deterministic checkpoints (`tiny_models`), spawned
gloo ranks (`multiprocess`), a server subprocess (`server`), and float tolerances (`tolerance`)."""
