"""Shared pytest fixtures: the converted default model and the tiny random-weight checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from minisgl.models.default_model import ensure_default_model
from minisgl.testing.tiny_models import make_tiny_model


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face checkpoint, converted once into the shared cache."""
    return ensure_default_model(quiet=True)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Factory `tiny_model(name) -> checkpoint dir`; each model is built at most once per session.

    Built fresh under the session's temp dir rather than the shared cache, so a spec edited in
    `tiny_models.py` is never served from an old build. A build takes well under a second.
    """
    root = tmp_path_factory.mktemp("tiny-models")

    def tiny_model(name: str) -> Path:
        return make_tiny_model(name, root / name)  # reuses the directory once it is complete

    return tiny_model
