"""bench/count_calls.py: the counter wraps the watched methods in a process started as ``python
-m gateway`` only, and the summary's rates are taken over the span the ticker fired at full
rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import count_calls


def test_the_counter_counts_only_the_process_run_as_the_named_module(tmp_path):
    env = count_calls.environment(tmp_path, every_s=0.2)
    env["COUNT_CALLS_WATCH"] = json.dumps(
        [["gateway.config", "GatewayConfig", "__init__", "a config made"]])
    script = ("import time, gateway.config as c\n"
              "time.sleep(1.0)\n"  # (the counter looks for its modules every 0.2 s)
              "for _ in range(3): c.GatewayConfig()\n"
              "time.sleep(1.0)\n")  # (and writes its totals every 0.2 s here)
    # only the process run as the named module is counted
    other = subprocess.run([sys.executable, "-c", script], env=env, cwd=count_calls.REPO,
                           capture_output=True, text=True, timeout=60, check=False)
    assert other.returncode == 0, other.stderr
    assert not list(tmp_path.glob("calls-*.jsonl"))
    (tmp_path / "counted.py").write_text(script)  # run as python -m counted
    env["COUNT_CALLS_MODULE"] = "counted"
    env["PYTHONPATH"] += os.pathsep + str(count_calls.REPO)
    run = subprocess.run([sys.executable, "-m", "counted"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    rows = count_calls.read_rows(next(tmp_path.glob("calls-*.jsonl")))
    assert rows[-1]["a config made"][0] == 3


def row(t: float, fires: int, flush_s: float, other_s: float, cpu_s: float
        ) -> dict[str, list[float]]:
    return {"_mono": [0, t], "_cpu": [0, cpu_s], "a fire": [fires, 0.0],
            "C flush (sendmmsg)": [fires, flush_s], "a sender report": [fires // 2, other_s]}


def test_the_summary_takes_the_span_at_full_rate():
    rows = [row(0, 0, 0, 0, 0), row(2, 10, 0.01, 0.0, 0.02),  # starting
            row(4, 810, 0.41, 0.02, 1.62),  # 400 fires a second, connecting: CPU 0.8
            row(6, 1610, 0.81, 0.04, 2.42), row(8, 2410, 1.21, 0.06, 3.22),  # steady: 0.4
            row(10, 2420, 1.22, 0.06, 3.24)]  # winding down
    summary = count_calls.summarise(rows)
    assert summary["seconds"] == pytest.approx(4.0)
    assert summary["calls"]["a fire"]["per_s"] == pytest.approx(400)
    assert summary["cpu_ms_per_s"] == pytest.approx(400)
    assert summary["c_ms_per_s"] == pytest.approx(200)  # the labels starting "C "
    assert summary["rest_ms_per_s"] == pytest.approx(200)
    assert summary["calls"]["a sender report"]["us_each"] == pytest.approx(0.02 / 400 * 1e6)
    with pytest.raises(ValueError):
        count_calls.summarise([row(0, 0, 0, 0, 0), row(2, 0, 0, 0, 0)])


def test_every_watched_method_exists():
    """A rename in the gateway must not leave the counter silently counting nothing."""
    import importlib

    for module, cls, method, _ in count_calls.WATCH:
        assert hasattr(getattr(importlib.import_module(module), cls), method), (module, cls,
                                                                              method)


def test_the_site_directory_holds_the_counter():
    assert (Path(count_calls.SITE) / "sitecustomize.py").is_file()
