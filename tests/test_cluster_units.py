"""Scale-out pieces on their own: the node selector, reservations, the flags, the per-worker
pool sizes, the supervisor's metrics merge, the worker's forwarded client address and absolute
Locations, and the Redis directory against a real redis-server."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway import aiortc_compat
from gateway.api.app import create_app
from gateway.cluster import placement
from gateway.cluster.directory import (
    SESSION_TTL_S,
    WORKER_TTL_S,
    RedisDirectory,
    Unavailable,
    WorkerStatus,
    redacted,
)
from gateway.cluster.identity import ENV, PROXY_HEADER, WorkerIdentity
from gateway.cluster.metrics import SupervisorMetrics
from gateway.cluster.placement import Candidate, Reservations, choose
from gateway.cluster.processes import Slot, worker_args
from gateway.cluster.supervisor import needs_supervisor, node_id
from gateway.cluster.worker import attach_worker
from gateway.config import GatewayConfig, parse_config
from gateway.runtime import worker_pool
from tests.conftest import tone_voices
from tests.installed import missing

LOOPBACK = "127.0.0.1"


def status(wid: str, sessions: int = 0, cap: int = 10, cpu: float = 0.0, state: str = "serving",
           ts: float | None = None, node: str = "n1") -> WorkerStatus:
    return WorkerStatus(id=wid, node=node, url=f"http://h/{wid}", pid=1, sessions=sessions,
                        max_sessions=cap, cpu=cpu, process_cpu=cpu, state=state,
                        ts=time.time() if ts is None else ts, node_url=f"http://{node}")


def cand(wid: str, local: bool = True, **kw) -> Candidate:
    s = status(wid, **kw)
    return Candidate(s, local, s.sessions)


# -- the node selector -------------------------------------------------------------------------


def test_the_least_loaded_worker_with_room_is_chosen():
    rng = random.Random(1)
    got = choose([cand("a", sessions=3), cand("b", sessions=1), cand("c", sessions=2)], rng)
    assert got is not None and got.id == "b"
    # full or draining: never, whatever their load says
    assert choose([cand("a", sessions=10), cand("b", state="draining")], rng) is None
    assert choose([], rng) is None


def test_hot_workers_are_avoided_unless_all_are_hot():
    rng = random.Random(1)
    # b has fewer sessions but its loop is at 95 % of a core
    got = choose([cand("a", sessions=5, cpu=0.1), cand("b", sessions=1, cpu=0.95)], rng)
    assert got is not None and got.id == "a"
    both_hot = [cand("a", sessions=5, cpu=0.96), cand("b", sessions=1, cpu=0.95)]
    got = choose(both_hot, rng)
    assert got is not None and got.id == "b"


def test_local_wins_unless_a_remote_worker_is_clearly_less_loaded():
    rng = random.Random(1)
    local = cand("l", sessions=2, cpu=0.01)  # 0.2
    near = cand("r", local=False, sessions=2)  # 0.2: a tie
    noise = cand("r", local=False, sessions=2, cap=11)  # 0.18: within the margin
    better = cand("r", local=False, sessions=0)
    assert choose([local, near], rng).id == "l"
    assert choose([local, noise], rng).id == "l"
    assert choose([local, better], rng).id == "r"
    assert choose([cand("l", sessions=10), near], rng).id == "r"  # a full node sends on


def test_many_remote_workers_get_two_random_choices():
    rng = random.Random(7)
    remote = [cand(f"r{i}", local=False, sessions=i) for i in range(8)]
    picks = [choose(remote, rng).id for _ in range(400)]
    # never the most loaded (it loses every pair), the least loaded most often, and spread
    assert "r7" not in picks
    counts = {p: picks.count(p) for p in set(picks)}
    assert max(counts, key=counts.get) == "r0" and len(counts) >= 4


def test_reservations_count_until_stats_taken_after_them_arrive():
    r = Reservations()
    t = time.time()
    old = status("w", sessions=1, ts=t - 2)
    r.placed("w", at=t - 1)
    r.begin("w")  # one more in flight
    assert r.pending(old, now=t) == 2
    assert r.candidate(old, local=True).sessions == 3
    r.end("w", created=False)
    assert r.pending(old, now=t) == 1
    fresh = status("w", sessions=2, ts=t - 0.5)  # counted by the worker now
    assert r.pending(fresh, now=t) == 0
    assert r.pending(old, now=t + placement.RESERVATION_S) == 0  # forgotten


def test_worker_status_round_trips_as_json():
    s = status("w", sessions=3, cap=4, cpu=0.2)
    data = json.loads(json.dumps(s.as_json()))
    assert data["load"] == 0.75
    assert WorkerStatus.from_json({**data, "unknown": 1}) == s


# -- flags, argv, sizes ------------------------------------------------------------------------


def test_flags(monkeypatch):
    assert parse_config([]).workers == 1
    assert parse_config(["--workers", "3"]).workers == 3
    assert parse_config(["--workers", "auto"]).workers == len(os.sched_getaffinity(0))
    with pytest.raises(SystemExit):
        parse_config(["--workers", "0"])
    with pytest.raises(SystemExit):
        parse_config(["--session-id-prefix", "a/b"])
    monkeypatch.setenv("GATEWAY_WORKERS", "2")
    monkeypatch.setenv("GATEWAY_REDIS_URL", "redis://r:6379/0")
    monkeypatch.setenv("GATEWAY_ADVERTISE_URL", "http://10.0.0.5:8080")
    c = parse_config([])
    assert (c.workers, c.redis_url, c.advertise_url) == (2, "redis://r:6379/0",
                                                         "http://10.0.0.5:8080")
    assert needs_supervisor(c)
    monkeypatch.setenv(ENV, "{}")  # a worker: never a supervisor of its own
    assert not needs_supervisor(c)


def test_worker_args_override_the_supervisors_own():
    config = parse_config(["--workers=4", "--port", "9000", "--cors-origins", "https://app"])
    slot = Slot(index=1, id="abcw1", port=9002, url="http://h:9002", local_url="http://l:9002")
    args = worker_args(["--workers=4", "--port", "9000", "--cors-origins", "https://app"],
                       config, slot, "http://h:9000")
    worker = parse_config(args)  # argparse: the last occurrence wins
    assert (worker.workers, worker.port, worker.session_id_prefix, worker.advertise_url) == (
        1, 9002, "abcw1-", "http://h:9002")
    assert worker.cors_origins == ("https://app", "http://h:9000")  # the page calls workers
    assert node_id("http://h:9000") == node_id("http://h:9000") != node_id("http://h:9100")


def test_pools_take_their_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv(worker_pool.PROCESSES_ENV, raising=False)
    assert (worker_pool.cpu_share(), worker_pool.default_workers()) == (8, 7)
    monkeypatch.setenv(worker_pool.PROCESSES_ENV, "4")
    assert (worker_pool.cpu_share(), worker_pool.default_workers()) == (2, 1)
    monkeypatch.setenv(worker_pool.PROCESSES_ENV, "16")
    assert (worker_pool.cpu_share(), worker_pool.default_workers()) == (1, 1)
    monkeypatch.setattr(worker_pool, "_ENCODER_POOL", None)
    monkeypatch.setenv(worker_pool.PROCESSES_ENV, "2")
    assert worker_pool.encoder_pool().workers == 4
    monkeypatch.setattr(worker_pool, "_ENCODER_POOL", None)


# -- metrics -----------------------------------------------------------------------------------


def test_supervisor_metrics_merge_every_workers_families():
    m = SupervisorMetrics(redis=True)
    text = ("# HELP voice_gateway_sessions_created_total Sessions created\n"
            "# TYPE voice_gateway_sessions_created_total counter\n"
            "voice_gateway_sessions_created_total {}\n"
            "# HELP voice_gateway_sessions_closed_total Sessions closed, by reason\n"
            "# TYPE voice_gateway_sessions_closed_total counter\n"
            'voice_gateway_sessions_closed_total{{reason="idle"}} 1.0\n')
    m.from_workers.texts = {"w0": text.format(3.0), "w1": text.format(5.0)}
    m.redis_up.set(1)
    out = m.exposition().decode()
    assert out.count("# HELP voice_gateway_sessions_created_total") == 1
    assert 'voice_gateway_sessions_created_total{worker="w0"} 3.0' in out
    assert 'voice_gateway_sessions_created_total{worker="w1"} 5.0' in out
    assert 'voice_gateway_sessions_closed_total{reason="idle",worker="w1"} 1.0' in out
    assert "voice_gateway_cluster_redis_up 1.0" in out
    assert "redis_up" not in SupervisorMetrics(redis=False).exposition().decode()


# -- a supervised worker, in process -----------------------------------------------------------


async def test_a_worker_trusts_forwarded_addresses_only_from_its_proxy(monkeypatch):
    identity = WorkerIdentity(worker="nw0", node="n", node_url="http://pub", index=0,
                              token="secret", supervisor_pid=os.getppid())
    monkeypatch.setenv(ENV, identity.to_env())
    config = GatewayConfig(host=LOOPBACK, port=0, ice_hosts=(LOOPBACK,), rate_limit_sessions=0.5,
                           session_id_prefix="nw0-", advertise_url="http://w.example:9001/")
    app = create_app(config, tone_voices())
    agent = attach_worker(app, config)
    assert agent is not None
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    url = f"http://{LOOPBACK}:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as http:

            async def post(headers: dict[str, str]) -> int:
                async with http.post(f"{url}/v1/sessions", data="x",
                                     headers={"Content-Type": "text/plain", **headers}) as r:
                    return r.status  # 415 once past the rate limit (burst 1)

            vouched = {PROXY_HEADER: "secret"}
            assert await post({**vouched, "X-Forwarded-For": "203.0.113.1"}) == 415
            assert await post({**vouched, "X-Forwarded-For": "203.0.113.1"}) == 429
            assert await post({**vouched, "X-Forwarded-For": "198.51.100.2"}) == 415
            # without the token the header is the client's own claim: ignored
            assert await post({"X-Forwarded-For": "192.0.2.3"}) == 415
            assert await post({"X-Forwarded-For": "192.0.2.4"}) == 429
            assert await post({PROXY_HEADER: "wrong", "X-Forwarded-For": "192.0.2.5"}) == 429
            async with http.get(f"{url}/healthz") as r:
                worker = (await r.json())["worker"]
            assert (worker["id"], worker["state"], worker["pid"]) == ("nw0", "serving",
                                                                      os.getpid())
            assert worker["url"] == "http://w.example:9001" and worker["redis"] is None
            # absolute, final Locations under --advertise-url; ids carry the prefix
            aiortc_compat.restrict_ice_hosts((LOOPBACK,))
            from aiortc import RTCConfiguration, RTCPeerConnection

            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pc.addTransceiver("audio", direction="recvonly")
            await pc.setLocalDescription(await pc.createOffer())
            async with http.post(f"{url}/v1/sessions", headers={
                    **vouched, "X-Forwarded-For": "203.0.113.9"},  # a fresh rate-limit bucket
                    json={"type": "offer", "sdp": pc.localDescription.sdp}) as r:
                assert r.status == 201, await r.text()
                body = await r.json()
            await pc.close()
            assert body["id"].startswith("nw0-")
            assert body["location"] == r.headers["Location"] == (
                f"http://w.example:9001/v1/sessions/{body['id']}")
    finally:
        await runner.cleanup()
        aiortc_compat.restrict_ice_hosts(None)


# -- the Redis directory -----------------------------------------------------------------------


@pytest.fixture
def redis_url(tmp_path: Path):
    import shutil

    if shutil.which("redis-server") is None:
        missing("redis-server", "the Redis directory (Debian: apt-get install -y redis-server)")
    from bench.cluster import free_range
    from tests.test_cluster import RedisServer

    server = RedisServer(free_range(1), tmp_path / "redis.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()


async def test_directory_keys_and_their_ttls(redis_url):
    d = RedisDirectory(redis_url.url)
    try:
        await d.put_worker(status("n1w0", sessions=2))
        await d.put_worker(status("n2w0", node="n2"))
        await d.put_node({"id": "n1", "url": "http://n1"})
        await d.put_sessions("n1w0", 4242, ["n1w0-abc", "n1w0-def"])
        assert {w.id for w in await d.workers()} == {"n1w0", "n2w0"}
        assert [n["id"] for n in await d.nodes()] == ["n1"]
        assert await d.session_owner("n1w0-abc") == ("n1w0", 4242)
        assert await d.session_owner("nope") is None
        assert 0 < int(redis_url.command("PTTL", "vg:worker:n1w0")) <= WORKER_TTL_S * 1000
        assert 0 < int(redis_url.command("PTTL", "vg:node:n1")) <= WORKER_TTL_S * 1000
        assert 0 < int(redis_url.command("PTTL", "vg:session:n1w0-abc")) <= SESSION_TTL_S * 1000
        # an entry gone (expired, or dropped): readers prune the index
        redis_url.command("DEL", "vg:worker:n2w0")
        assert [w.id for w in await d.workers()] == ["n1w0"]
        assert redis_url.command("SISMEMBER", "vg:workers", "n2w0") == "0"
        await d.drop_sessions(["n1w0-abc"])
        assert await d.session_owner("n1w0-abc") is None
        assert d.health()["ok"] is True
    finally:
        await d.close()


async def test_directory_fails_fast_when_redis_is_unreachable(redis_url):
    redis_url.stop()
    d = RedisDirectory(redis_url.url.replace("redis://", "redis://:pw@"))
    started = time.monotonic()
    try:
        with pytest.raises(Unavailable):
            await d.put_worker(status("w"))
        assert time.monotonic() - started < 3
        health = d.health()
        assert health["ok"] is False and health["errors"] == 1 and health["error"]
        assert "pw" not in health["url"] and redacted("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    finally:
        await d.close()


# -- the benchmark's machinery, tiny -----------------------------------------------------------


def test_cluster_bench_smoke(tmp_path, capsys):
    """``python -m bench.cluster`` end to end at a tiny scale (4 sessions, a 1 s window): it
    asserts what the machinery measured, not performance (the machine is shared)."""
    from bench import cluster

    out = tmp_path / "cluster.json"
    data = cluster.main(["--ladder", "4", "--window", "1", "--phrase-s", "1", "--probe", "2",
                         "--min-on-time", "0", "--out", str(out)])
    assert json.loads(out.read_text())["benchmark"] == "cluster"
    for workers in ("1", "2"):
        (rung,) = data["results"][workers]
        assert "error" not in rung, rung.get("error")
        assert rung["connect"]["ok"] == 4 and rung["speech_failed"] == 0
        assert sum(rung["streams_per_worker"].values()) == 4
        window = rung["speaking"]
        assert window["sessions_measured"] == 4 and window["packets_received"] > 0
        assert window["workers_us_per_packet"] > 0
    assert set(data["results"]["2"][0]["streams_per_worker"]) == {"w0", "w1"}  # both used
    for path in ("public_port", "worker_direct"):
        assert data["connect_probe"][path]["post_to_201_ms"]["n"] == 2
    assert "connect via public_port" in capsys.readouterr().out
