"""Shared test helpers: the skip-or-fail rule for optional tools, and hypothesis settings.

Tests that need a tool the default install lacks (PyTorch, a browser) skip with a clear reason,
except where CI sets MEMMATH_REQUIRE_<TOOL>=1: there a missing tool is a failure, never a skip.

    def test_something(torch):                         # the fixtures below: torch, transformers, peft
        ...
    def test_other(require):
        playwright = require("playwright.sync_api", env="MEMMATH_REQUIRE_BROWSER")
"""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import HealthCheck, settings

TORCH_ENV = "MEMMATH_REQUIRE_TORCH"


def skip_or_fail(reason: str, env: str) -> None:
    """Skip the running test with `reason`, or fail it when the environment variable `env` is '1'."""
    if os.environ.get(env) == "1":
        pytest.fail(f"{reason}, and {env}=1 requires it", pytrace=False)
    pytest.skip(reason)


def require(module: str, env: str = TORCH_ENV):
    """Import `module` for a test, or skip (fail under env=1) saying what is missing and how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        skip_or_fail(f"{module} is not importable ({error}); pip install -r requirements-validate.txt", env)


@pytest.fixture(name="require")
def _require_fixture():
    """The `require(module, env=...)` helper as a fixture, for test files that cannot import conftest."""
    return require


@pytest.fixture
def torch():
    return require("torch")


@pytest.fixture
def transformers(torch):
    return require("transformers")


@pytest.fixture
def peft(torch):
    return require("peft")


# Hypothesis: no deadline (two shared cores make timings noisy); HYPOTHESIS_PROFILE=thorough for more.
settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
