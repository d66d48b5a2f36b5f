"""Linux ``perf`` on the server over a load window: where its CPU goes below Python.

py-spy (``bench.load --profile N``) shows which Python function a sample was in; perf shows
which native code: the interpreter's own instructions, libpython's helpers (attribute reads,
allocation), libsrtp and OpenSSL, the kernel's UDP path. On 2026-12-06 it showed the send path's
cost to be cache misses on each stream's Python objects (docs/density.md, "Where the time goes
in the CPU"), which py-spy cannot show. ``bench.load --profile N --profiler perf``; perf comes
from Debian's ``linux-perf``. Software clock sampling only: a VM has no hardware counters.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

_ROW = re.compile(r"^\s+([0-9.]+)%\s+(.+?)\s*$")


def available() -> bool:
    return shutil.which("perf") is not None


def record_command(pid: int, seconds: float, out: str) -> list[str]:
    """perf sampling ``pid`` at ~1 kHz with call chains for ``seconds``, into ``out``."""
    return ["perf", "record", "-F", "997", "-g", "-p", str(pid), "-o", out, "--", "sleep",
            str(max(1, round(seconds)))]


def _report(path: Path, sort: str, top: int) -> list[tuple[str, float]]:
    done = subprocess.run(
        ["perf", "report", "-i", str(path), "--stdio", "--no-children", "-g", "none",
         "--sort", sort], capture_output=True, text=True, check=False,
    )
    rows = []
    for line in done.stdout.splitlines():
        match = _ROW.match(line)
        if match:
            name = match.group(2).replace("[.] ", "").replace("[k] ", "kernel: ")
            rows.append((name, float(match.group(1))))
    return rows[:top]


def summary(path: Path, top: int = 25) -> dict[str, Any]:
    """The share of samples by shared object and by symbol (self time), the largest first."""
    return {"by_object": _report(path, "dso", 12), "by_symbol": _report(path, "sym", top)}
