"""bench/http_stream.py's machinery at a tiny scale: every phase, 3 streams, a 1 s window.

Proves that ``python -m bench.http_stream`` works end to end (gateway, stand-in and baseline
processes, the phrase cache warm-up, the pinned load generator, /proc sampling, JSON, table and
plot). It asserts what the machinery measured, not performance: CI machines are shared.
"""

from __future__ import annotations

import json
import os

import pytest

from bench import http_stream
from tests.installed import need_module

need_module("starlette", "the dev tools (the baseline server)")
need_module("uvicorn", "the dev tools (the baseline server)")


@pytest.mark.timeout(240)
def test_http_stream_bench_smoke(tmp_path, capsys):
    out = tmp_path / "http_stream.json"
    cpus = ["--server-cpu", "0", "--loadgen-cpu", "1"] if (os.cpu_count() or 1) >= 2 else [
        "--server-cpu", "-1", "--loadgen-cpu", "-1"]
    data = http_stream.main([
        *cpus, "--phases", "latency,density,baseline,flush", "--runs", "1", "--streams", "3",
        "--seconds", "1", "--settle-s", "0.2", "--phrase-s", "6", "--retries", "0",
        "--cadence-probe", "100", "--out", str(out),
    ])
    printed = capsys.readouterr().out
    assert "request -> first audio byte" in printed and "targets:" in printed
    assert json.loads(out.read_text())["benchmark"] == "http_stream"
    rows = data["latency"]["rows"]
    for name in ("cosyvoice-150ms/frames", "cosyvoice-150ms/opus"):
        row = rows[name]
        assert row["first_audio_ms"]["n"] == 1
        # the stand-in holds its first chunk back 150 ms: nothing arrives before that
        assert row["first_audio_ms"]["median"] >= 140
        assert row["backend_ms"]["median"] >= 140
    if data["latency"]["piper_installed"]:
        assert rows["cache-hit/frames"]["first_audio_ms"]["n"] == 1
        assert data["latency"]["cache_stats"]["hits"] >= 2
    assert data["phrase_cache_warmup"]["files"] == 1
    for name in ("gateway-adaptive", "baseline", "gateway-frame", "probe-write-100ms"):
        run = data["density"][name]["3"]
        assert "error" not in run, run.get("error")
        assert run["streams_ran"] == 3 and run["status_200"] == 3
        assert 45 <= run["frames_per_stream_per_s"] <= 55  # live pace: 50 frames a second
        assert run["server_cpu_pct"] >= 0 and run["idle_rss_kb"] > 0  # 3 streams: ~a tick
        assert run["lateness"]["frames"] > 0
        assert run["writes_per_s"] > 0
    # one frame per write at live pace, except where the probe coalesces 100 ms
    assert data["density"]["gateway-frame"]["3"]["frames_per_write"] == pytest.approx(1, abs=0.05)
    assert data["density"]["probe-write-100ms"]["3"]["frames_per_write"] > 3
    assert set(data["verdict"]) >= {"density_cpu", "density_rss", "density_all_ran"}
    assert "3" in data["ratios_gateway_over_baseline"]
