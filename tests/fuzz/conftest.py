"""The fuzz suite: Hypothesis properties of every parser that takes outside bytes.

Profiles: see tests/fuzz/profiles.py (``ci`` by default, ``HYPOTHESIS_PROFILE=fuzz`` for the
long run). The ``fuzz`` marker is registered here too, so the suite does not warn before
pyproject.toml lists it.
"""

from __future__ import annotations

import pytest

from tests.fuzz import profiles


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fuzz: Hypothesis fuzzing of parsers of outside bytes (tests/fuzz)"
    )


def pytest_report_header(config: pytest.Config) -> str:
    return f"fuzz profile: {profiles.PROFILE}"
