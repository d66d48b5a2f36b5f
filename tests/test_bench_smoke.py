"""The load benchmark's machinery at a tiny scale: both servers, 3 sessions, a 2 s window.

Proves that ``python -m bench.load`` works end to end (server processes, the load generator's
header-only and fully decoding listeners, the phrase cache warm-up, /proc sampling, JSON, table
and plot). It asserts what the machinery measured, not performance: CI machines are shared.
"""

from __future__ import annotations

import importlib.util
import json
import os

from bench import load
from tests.installed import missing


def test_load_bench_smoke(tmp_path, capsys):
    out = tmp_path / "load.json"
    cpus = ["--server-cpu", "0", "--loadgen-cpu", "1"] if (os.cpu_count() or 1) >= 2 else [
        "--server-cpu", "-1", "--loadgen-cpu", "-1"]
    data = load.main([
        *cpus,
        "--ladder", "3", "--window", "2", "--silent-window", "1", "--phrase-s", "1",
        "--probe-overhead", "1", "--min-on-time", "0", "--out", str(out),
    ])
    printed = capsys.readouterr().out
    assert "gateway/baseline (speaking) N=3" in printed
    assert json.loads(out.read_text())["benchmark"] == "load"
    assert data["settings"]["gateway_speech"] in ("cache", "encode")
    for kind in ("gateway", "baseline"):
        (rung,) = data["results"][kind]
        assert "error" not in rung, rung.get("error")
        assert rung["connect"] == {**rung["connect"], "ok": 3, "failed": 0}
        assert rung["speech_requests"]["failed"] == 0
        for phase in ("silent", "speaking"):
            window = rung[phase]
            assert window["sessions_measured"] == 3
            assert window["packets_received"] > 0
            assert 0 < window["on_time_share"] <= 1
            assert window["lateness_ms"]["p99"] >= 0
            assert window["server_cpu_pct"] > 0
            assert window["server_rss_kb"] > 0
        assert rung["silent"]["speech_share"] < 0.5  # silence is told apart from speech
        assert rung["speaking"]["speech_share"] > 0.5
        # The fully decoding listeners heard the 440 Hz tone.
        checks = rung["decode_check"]
        assert len(checks) == 2
        for check in checks:
            assert check["packets"] > 0
            assert abs(check["peak_hz"] - 440) < 5
    probe = data["results"]["gateway"][0]["server_overhead_ms"]
    assert probe["probes"] == 1
    # The probe has its own text: synthesized and encoded, never a phrase cache hit, so the
    # server's first PCM -> first RTP overhead is measured, split at the queue.
    assert probe["served_from_phrase_cache"] == 0
    total, processing, wait = (probe[k]["median"] for k in (
        "first_pcm_to_first_rtp", "first_pcm_to_first_frame_queued", "frame_queued_to_sent"))
    assert 0 <= processing <= total and 0 <= wait <= total
    assert abs(processing + wait - total) < 0.01
    if data["settings"]["gateway_speech"] == "cache":
        assert data["phrase_cache_warmup"]["files"] >= 1
    if importlib.util.find_spec("matplotlib") is None:
        missing("matplotlib", "the dev tools (bench plots)")
    assert (tmp_path / "load.png").stat().st_size > 0
