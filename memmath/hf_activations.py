"""Activation memory as the transformers implementations keep it (filled in by the fidelity work, issue 4)."""

from __future__ import annotations


def transformers_activations(shape, **_):
    """Not yet available: raises ValueError until the measured model lands."""
    raise ValueError("activations='transformers' is not available yet; use activations='textbook'")
