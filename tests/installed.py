"""The parts the suite needs that ``make test`` installs (Debian packages, extras, dev tools):
one rule for when one is missing. On a developer's machine its tests skip, with the reason;
under CI (``CI=true``, as .ci/run runs) they FAIL, because there ``make test`` has installed
everything and a missing part is a missing install step, which must never pass as a skip
(issue 29). tests/test_installed.py checks each part by name.

- ``missing(part, why)``: skip here, fail under CI (in a test, a fixture or at module level,
  where under CI it is a collection error: the run stops, loudly);
- ``needs(part, present, why)``: the same as a mark (module ``pytestmark`` or a decorator);
- ``need_module(name, part)``: ``pytest.importorskip`` with the same rule.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

UNDER_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
MARK = "needs_installed"


def missing(part: str, why: str) -> NoReturn:
    """``part`` is not installed: skip this test locally, fail it under CI."""
    if UNDER_CI:
        pytest.fail(f"{part} is missing under CI, where `make test` installs it: {why}",
                    pytrace=False)
    pytest.skip(f"{part} is not installed ({why}); `make test` installs it",
                allow_module_level=True)  # (inside a test it skips just the test)


def needs(part: str, present: bool, why: str) -> pytest.MarkDecorator:
    """A mark: the test needs ``part`` (``present`` says whether it is there); checked at
    set-up by ``pytest_runtest_setup`` below, which calls ``missing``."""
    return getattr(pytest.mark, MARK)(part=part, present=present, why=why)


def need_module(name: str, part: str) -> ModuleType:
    """Import ``name`` (a module an extra or a dev tool brings), or ``missing(part, ...)``."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(part, f"cannot import {name}: {exc}")


# The hooks that enforce ``needs`` (tests/conftest.py takes them; ``-p tests.installed`` too)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARK}(part, present, why): needs an installed part (tests/installed.py: "
        "skipped when absent, failed under CI)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Every ``needs`` mark on ``item`` whose part is absent: ``missing``."""
    for mark in item.iter_markers(MARK):
        if not mark.kwargs["present"]:
            missing(mark.kwargs["part"], mark.kwargs["why"])
