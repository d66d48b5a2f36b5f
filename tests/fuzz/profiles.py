"""Hypothesis profiles for the fuzz suite (tests/fuzz), applied per test, never globally.

- ``fuzz-ci`` (the default; ``HYPOTHESIS_PROFILE=ci`` means it too): a few hundred examples
  per pure parser, a few dozen per HTTP route, no example database, derandomized: the same
  inputs on every run, so CI is reproducible.
- ``fuzz`` (``HYPOTHESIS_PROFILE=fuzz``, ``make fuzz``): >= 10,000 examples per pure parser and
  1,000 per HTTP route, random, with Hypothesis' default database (``.hypothesis/``) so a
  failure found once is replayed first next time; no per-test timeout.

The CI profile is *not* registered as ``ci``: that is Hypothesis' built-in profile, which it
loads by itself when a ``CI`` variable is set, and re-registering the loaded profile reloads it
-- our counts would then become the default of every Hypothesis test in the run.

The profiles are applied with ``@fuzz_settings()`` / ``@fuzz_settings(http=True)`` on each test
rather than ``settings.load_profile``: loading one would change every other Hypothesis test of
the run (tests/unit uses Hypothesis too). ``FUZZ_EXAMPLES`` / ``FUZZ_HTTP_EXAMPLES`` override the
counts of the active profile (e.g. a quick local ``FUZZ_EXAMPLES=50``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, Verbosity, settings

PROFILE_ENV = "HYPOTHESIS_PROFILE"
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

_BASE = settings.get_profile("default")  # not whatever is loaded (CI=1 loads Hypothesis' "ci")
settings.register_profile(
    "fuzz-ci",
    _BASE,
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
settings.register_profile(
    "fuzz",
    _BASE,
    max_examples=10_000,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
    verbosity=Verbosity.normal,
)

#: HTTP examples per route (each is a real request through aiohttp).
HTTP_EXAMPLES = {"fuzz-ci": 25, "fuzz": 1_000}

PROFILE = "fuzz" if os.environ.get(PROFILE_ENV, "").strip() == "fuzz" else "fuzz-ci"
FUZZING = PROFILE == "fuzz"

T = TypeVar("T", bound=Callable[..., object])


def _override(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def fuzz_settings(*, http: bool = False, ci_scale: float = 1.0) -> Callable[[T], T]:
    """The active profile's settings for one fuzz test (``ci_scale`` shrinks a slow target's
    count under the ci profile only: the fuzz profile always runs them all)."""
    base = settings.get_profile(PROFILE)
    if http:
        examples = _override("FUZZ_HTTP_EXAMPLES") or HTTP_EXAMPLES[PROFILE]
    else:
        examples = _override("FUZZ_EXAMPLES") or base.max_examples
    if not FUZZING:
        examples = round(examples * ci_scale)
    return settings(base, max_examples=max(1, examples))  # type: ignore[return-value]


#: Every fuzz module sets ``pytestmark = FUZZ_MARKS``.
FUZZ_MARKS = [pytest.mark.fuzz, *([pytest.mark.timeout(0)] if FUZZING else [])]
