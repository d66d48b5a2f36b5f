"""Scale-out end to end: real supervisors (``python -m gateway --workers 2``), real workers, a
real Redis (Debian's ``redis-server``, no persistence, on a free loopback port) and real WebRTC
peers (``GatewayClient`` with ``capture=True``).

Two nodes on this machine share one Redis (one cluster): placement across workers and across
nodes (proxied locally, 307 to the other node), final absolute Locations, 503 when every worker
is full, session requests sent to a public port, the HTTP speech routes through the public
port, the aggregated /metrics, a worker SIGKILLed while the others stream (their packets
unaffected; it is replaced; its sessions are gone at once), Redis stopped and restarted (live
sessions carry on, placement falls back to local workers, /healthz and /metrics say so, the
registry refills), and SIGTERM (every worker drains, exit 0). One node without Redis keeps its
registry in memory.

The tests of a module share its nodes and run in file order (later ones kill things).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from bench.cluster import free_range
from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.rtp.seqnum import seq_diff
from tests.browser.conftest import browser, page, playwright_driver  # noqa: F401 (fixtures)
from tests.installed import missing

# serial: a killed worker's neighbours must keep their 20 ms pace (gaps < 250 ms) across
# processes, and the module's cluster fixture is started once
pytestmark = [pytest.mark.timeout(150), pytest.mark.serial]

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
WORKERS = 2
MAX_SESSIONS = 2  # per worker: 4 per node, 8 in the cluster


# -- processes ---------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("GATEWAY_", "VOICE_GATEWAY_"))}


class RedisServer:
    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.url = f"redis://{LOOPBACK}:{port}/0"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", LOOPBACK, "--save", "",
                 "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if self.command("PING") == "PONG":
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def command(self, *args: str) -> str:
        """One command in RESP; a simple, integer or bulk reply as text ("" for nil)."""
        with socket.create_connection((LOOPBACK, self.port), timeout=2) as s:
            parts = [f"*{len(args)}\r\n"] + [f"${len(a.encode())}\r\n{a}\r\n" for a in args]
            s.sendall("".join(parts).encode())
            reply = s.makefile("rb")
            line = reply.readline().decode().rstrip("\r\n")
            if line.startswith("$"):
                size = int(line[1:])
                return "" if size < 0 else reply.read(size + 2)[:size].decode()
            return line.lstrip("+:")


class Node:
    """One supervisor and its workers (``python -m gateway --workers 2``)."""

    def __init__(self, name: str, log_dir: Path, redis: RedisServer | None,
                 extra: tuple[str, ...] = ()) -> None:
        self.name = name
        self.port = free_range(WORKERS + 1)
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.worker_ports = [self.port + 1 + i for i in range(WORKERS)]
        self.log = log_dir / f"node-{name}.log"
        args = [sys.executable, "-m", "gateway", "--host", LOOPBACK, "--port", str(self.port),
                "--workers", str(WORKERS), "--ice-hosts", LOOPBACK, "--voice",
                "tone:440?seconds=1", "--voice", "long=tone:330?seconds=30",
                "--phrase-cache-mb", "0", "--max-sessions", str(MAX_SESSIONS),
                "--drain-timeout", "5", "--log-level", "WARNING", *extra]
        if redis is not None:
            args += ["--redis-url", redis.url]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=REPO, env=clean_env(), stdout=log,
                                         stderr=subprocess.STDOUT)

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
            return json.loads(r.read())

    def wait(self, check: Any, timeout: float = 60.0, what: str = "ready") -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"node {self.name} exited {self.proc.returncode}: "
                                     f"{self.tail()}")
            try:
                last = self.health()
                if check(last):
                    return last
            except OSError as exc:
                last = exc
            time.sleep(0.1)
        raise AssertionError(f"node {self.name} not {what} after {timeout} s: {last}\n"
                             f"{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 40.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def serving(workers: int = WORKERS):
    def check(h: dict[str, Any]) -> bool:
        return (len(h["workers"]) == workers
                and all(w["state"] == "serving" for w in h["workers"]))
    return check


def cluster_of(nodes: int, workers: int = WORKERS):
    def check(h: dict[str, Any]) -> bool:
        ns = (h.get("cluster") or {}).get("nodes", [])
        return (serving()(h) and len(ns) == nodes
                and all(len(n["workers"]) == workers for n in ns)
                and all(w["state"] == "serving" for n in ns for w in n["workers"]))
    return check


def idle(h: dict[str, Any]) -> bool:
    """No session anywhere in this node's view (its own workers' and the cluster's), and none
    its router still counts (a placement of an earlier test its stats have not shown yet)."""
    ns = (h.get("cluster") or {}).get("nodes", [])
    return (all(w["sessions"] == 0 for w in h["workers"])
            and all(w["sessions"] == 0 for n in ns for w in n["workers"])
            and all(c["sessions"] == 0 for c in h["placement_view"]))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        missing("redis-server", "the cluster registry (Debian: apt-get install -y redis-server; "
                ".ci/install-debian.sh installs it when it can)")
    server = RedisServer(free_range(1), tmp_path_factory.mktemp("redis") / "redis.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(redis_server: RedisServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node]]:
    logs = tmp_path_factory.mktemp("cluster")
    a, b = Node("a", logs, redis_server), Node("b", logs, redis_server)
    try:
        for node in (a, b):
            node.wait(cluster_of(2), timeout=90, what="in a cluster of two")
        yield a, b
    finally:
        for node in (a, b):
            node.stop()


@pytest.fixture(autouse=True)
def _ice_on_loopback() -> Iterator[None]:
    aiortc_compat.restrict_ice_hosts((LOOPBACK,))
    yield
    aiortc_compat.restrict_ice_hosts(None)


# -- clients -----------------------------------------------------------------------------------


async def connect(public: str, http: aiohttp.ClientSession) -> GatewayClient:
    """A listener through a public port (aiohttp follows a 307, body and method kept); its
    session URL is the absolute Location the worker gave."""
    client = GatewayClient(public, http, capture=True)
    try:
        await client.connect()
    except Exception as exc:  # say how the node counted its workers when it refused
        async with http.get(public + "/healthz") as r:
            view = (await r.json()).get("placement_view")
        raise AssertionError(f"{public} did not place a session: {exc}; "
                             f"its placement view: {view}") from exc
    assert client.session_url is not None
    # gateway.client.peer joins base_url and Location; these Locations are absolute.
    rest = client.session_url
    if rest.startswith(client.base_url) and rest[len(client.base_url):].startswith("http"):
        client.session_url = rest[len(client.base_url):]
    return client


async def offer_sdp() -> tuple[Any, str]:
    from aiortc import RTCConfiguration, RTCPeerConnection

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


def port_of(client: GatewayClient) -> int:
    assert client.session_url is not None
    port = URL(client.session_url).port
    assert port is not None
    return port


def session_id(client: GatewayClient) -> str:
    assert client.session_url is not None
    return client.session_url.rsplit("/", 1)[-1]


async def close_all(clients: list[GatewayClient]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def contiguous(seqs: list[int]) -> bool:
    return all(seq_diff(b, a) == 1 for a, b in itertools.pairwise(seqs))


# -- the cluster -------------------------------------------------------------------------------


def test_healthz_lists_workers_and_the_cluster(cluster):
    a, b = cluster
    h = a.health()
    assert h["role"] == "supervisor" and h["status"] == "ok" and h["placement"] == "cluster"
    assert h["redis"]["ok"] is True and h["max_sessions"] == WORKERS * MAX_SESSIONS
    assert [w["url"] for w in h["workers"]] == [f"http://{LOOPBACK}:{p}" for p in a.worker_ports]
    for w in h["workers"]:
        assert {"pid", "url", "sessions", "load", "state"} <= w.keys()
        assert w["pid"] > 0 and w["sessions"] == 0 and 0 <= w["load"] < 1
    nodes = {n["url"]: n for n in h["cluster"]["nodes"]}
    assert set(nodes) == {a.url, b.url}
    assert sorted(w["url"] for w in nodes[b.url]["workers"]) == [
        f"http://{LOOPBACK}:{p}" for p in b.worker_ports]


async def test_placement_spreads_over_workers_and_nodes_then_refuses(cluster):
    a, b = cluster
    a.wait(idle, timeout=10, what="idle")
    async with aiohttp.ClientSession() as http:
        clients: list[GatewayClient] = []
        try:
            # Through A only: one on each of the four workers, A's own proxied, B's by 307.
            before = placements(await fetch_text(a.url + "/metrics"))
            for _ in range(4):
                clients.append(await connect(a.url, http))
            assert sorted(map(port_of, clients)) == sorted(a.worker_ports + b.worker_ports)
            after = placements(await fetch_text(a.url + "/metrics"))
            assert after["local"] - before.get("local", 0) == 2
            assert after["remote"] - before.get("remote", 0) == 2
            # Final, absolute Locations: every later request works there, without a redirect.
            for c in clients:
                assert c.session_url is not None and c.session_url.startswith("http://")
                async with http.get(c.session_url, allow_redirects=False) as r:
                    assert r.status == 200, await r.text()
                    assert (await r.json())["id"] == session_id(c)
            # Sent to a public port anyway: its own worker's are proxied, the other's 307.
            for c in clients:
                path = f"/v1/sessions/{session_id(c)}"
                mine = port_of(c) in a.worker_ports
                async with http.get(a.url + path, allow_redirects=False) as r:
                    assert r.status == (200 if mine else 307)
                    if not mine:
                        assert r.headers["Location"] == c.session_url
                async with http.get(b.url + path, allow_redirects=False) as r:
                    assert r.status == (307 if mine else 200)
            said = [await c.say("Hello.", voice="tone") for c in clients]
            for c, s in zip(clients, said):
                state = await c.wait_utterance(s.utterance["id"])
                assert state["state"] == "done" and state["frames_sent"] == 50
            # Fill the cluster (2 per worker) through each node's own port; then 503 at both.
            for node in (a, a, b, b):
                clients.append(await connect(node.url, http))
            per_port: dict[int, int] = {}
            for c in clients:
                per_port[port_of(c)] = per_port.get(port_of(c), 0) + 1
            assert per_port == dict.fromkeys(a.worker_ports + b.worker_ports, MAX_SESSIONS)
            # Each node's router counts every worker full (its /healthz placement view).
            for node in (a, b):
                view = node.wait(lambda h: all(c["full"] for c in h["placement_view"]),
                                 timeout=10, what="every worker counted full")["placement_view"]
                assert len(view) == 4 and sum(c["local"] for c in view) == 2, view
            pc, sdp = await offer_sdp()
            try:
                for node in (a, b):
                    async with http.post(f"{node.url}/v1/sessions", data=sdp,
                                         headers={"Content-Type": "application/sdp"}) as r:
                        assert r.status == 503
                        assert int(r.headers["Retry-After"]) > 0
                        error = (await r.json())["error"]
                        assert error["code"] == "session_limit" and error["message"]
            finally:
                await pc.close()
        finally:
            await close_all(clients)


def placements(metrics: str) -> dict[str, float]:
    out = {}
    for line in metrics.splitlines():
        if line.startswith("voice_gateway_cluster_placements_total{"):
            target = line.split('target="', 1)[1].split('"', 1)[0]
            out[target] = float(line.rsplit(" ", 1)[1])
    return out


async def fetch_text(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        assert r.status == 200
        return await r.text()


async def test_speech_routes_through_the_public_port(cluster):
    a, _ = cluster
    async with aiohttp.ClientSession() as http:
        body = {"model": "tts-1", "input": "Hello.", "voice": "tone", "response_format": "pcm"}
        async with http.post(f"{a.url}/v1/audio/speech", json=body) as r:
            assert r.status == 200 and r.headers.get("Transfer-Encoding") == "chunked"
            pcm = await r.read()
        assert len(pcm) == 24_000 * 2  # one second of 24 kHz s16 mono
        async with http.get(f"{a.url}/v1/audio/speech",
                            params={"input": "Hi.", "voice": "tone",
                                    "response_format": "opus"}) as r:
            assert r.status == 200 and (await r.read()).startswith(b"OggS")
        async with http.post(f"{a.url}/v1/speech/stream",
                             json={"text": "Hello.", "voice": "tone"}) as r:
            assert r.status == 200
            framed = await r.read()
        assert framed.startswith(b"VGOF") and framed.endswith(b"\x02")
        async with http.get(f"{a.url}/v1/voices") as r:
            assert (await r.json())["voices"] == ["tone", "long"]


async def test_metrics_cover_every_worker(cluster):
    a, _ = cluster
    text = await fetch_text(a.url + "/metrics")
    for w in ("w0", "w1"):
        assert f'voice_gateway_sessions_created_total{{worker="{w}"}}' in text
        assert f'voice_gateway_cluster_worker_up{{worker="{w}"}} 1.0' in text
    assert "voice_gateway_cluster_redis_up 1.0" in text
    helps = [line for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(helps) == len(set(helps))  # one family per name, every worker's samples in it


async def test_a_killed_worker_loses_only_its_own_sessions(cluster, redis_server):
    a, b = cluster
    a.wait(lambda h: cluster_of(2)(h) and idle(h), timeout=10, what="idle")
    async with aiohttp.ClientSession() as http:
        clients = [await connect(a.url, http) for _ in range(4)]  # one on every worker
        try:
            assert sorted(map(port_of, clients)) == sorted(a.worker_ports + b.worker_ports)
            for c in clients:
                said = await c.say("A long tone.", voice="long")
                async with http.get(f"{c.session_url}/speech/{said.utterance['id']}",
                                    params={"wait": "sent"}) as r:
                    assert (await r.json())["first_seq"] is not None
            victim = next(c for c in clients if port_of(c) == a.worker_ports[1])
            others = [c for c in clients if c is not victim]
            before = {w["name"]: w for w in a.health()["workers"]}["w1"]
            await asyncio.sleep(1.0)
            killed_at = time.monotonic()
            os.kill(before["pid"], signal.SIGKILL)
            await asyncio.sleep(3.0)
            for c in others:  # not one packet missed, none late by much
                window = [p for p in c.capture.packets
                          if killed_at - 1.0 <= p.arrival <= killed_at + 3.0]
                seqs = [p.seq for p in window]
                assert contiguous(seqs), (port_of(c), seqs[:5])
                assert len(window) >= 190, len(window)  # 4 s at 50 packets/s
                gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(window)]
                assert max(gaps) < 0.25, max(gaps)
            assert not [p for p in victim.capture.packets if p.arrival > killed_at + 0.5]
            # Replaced within seconds, as a new process at the same address.
            after = a.wait(lambda h: h["workers"][1]["state"] == "serving"
                           and h["workers"][1]["pid"] != before["pid"], timeout=30,
                           what="with w1 replaced")["workers"][1]
            assert after["restarts"] == before["restarts"] + 1 and after["url"] == before["url"]
            # Its sessions are gone at once (the owner entry names the dead pid) and expire.
            sid = session_id(victim)
            for node in (a, b):
                async with http.get(f"{node.url}/v1/sessions/{sid}",
                                    allow_redirects=False) as r:
                    assert r.status == 404
                    assert (await r.json())["error"]["code"] == "unknown_session"
            assert 0 < int(redis_server.command("PTTL", f"vg:session:{sid}")) <= 15_000
            text = await fetch_text(a.url + "/metrics")
            assert 'voice_gateway_cluster_worker_restarts_total{worker="w1"} 1.0' in text
        finally:
            await close_all(clients)


async def test_redis_outage_then_recovery(cluster, redis_server):
    a, b = cluster
    a.wait(lambda h: cluster_of(2)(h) and idle(h), timeout=30, what="idle")
    async with aiohttp.ClientSession() as http:
        clients = [await connect(a.url, http), await connect(b.url, http)]
        try:
            redis_server.stop()
            a.wait(lambda h: h["redis"]["ok"] is False and h["placement"] == "local",
                   timeout=10, what="aware that Redis is down")
            # Live sessions carry on.
            for c in clients:
                said = await c.say("Still here.", voice="tone")
                state = await c.wait_utterance(said.utterance["id"])
                assert state["state"] == "done" and state["frames_sent"] == 50
                assert contiguous([p.seq for p in c.capture.packets])
            text = await fetch_text(a.url + "/metrics")
            assert "voice_gateway_cluster_redis_up 0.0" in text
            # Placement falls back to this node's workers.
            for _ in range(2):
                clients.append(await connect(a.url, http))
                assert port_of(clients[-1]) in a.worker_ports
            # Redis comes back empty: the heartbeats fill it again.
            redis_server.start()
            a.wait(cluster_of(2), timeout=15, what="in the cluster again")
            remote = clients[1]
            deadline = time.monotonic() + 10
            while not redis_server.command("GET", f"vg:session:{session_id(remote)}"):
                assert time.monotonic() < deadline, "session owner entry not re-set"
                await asyncio.sleep(0.2)
            async with http.get(f"{a.url}/v1/sessions/{session_id(remote)}",
                                allow_redirects=False) as r:
                assert r.status == 307 and r.headers["Location"] == remote.session_url
        finally:
            await close_all(clients)


def test_sigterm_drains_every_worker_and_exits_0(cluster):
    a, b = cluster
    pids = [w["pid"] for w in b.health()["workers"]]
    assert b.stop() == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    a.wait(cluster_of(1), timeout=10, what="alone in the cluster")


# -- one node, no Redis ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lone_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    logs = tmp_path_factory.mktemp("lone")
    node = Node("lone", logs, None, ("--phrase-cache-dir", str(logs / "phrases"),
                                     "--phrase-cache-mb", "4"))
    try:
        node.wait(serving(), timeout=60)
        yield node
    finally:
        node.stop()


async def test_without_redis_one_node_places_and_routes(lone_node):
    node = lone_node
    h = node.health()
    assert h["redis"] is None and "cluster" not in h and h["placement"] == "local"
    async with aiohttp.ClientSession() as http:
        clients = [await connect(node.url, http) for _ in range(2)]
        try:
            assert sorted(map(port_of, clients)) == node.worker_ports
            for c in clients:  # the id names its worker: routed by prefix through the port
                async with http.delete(f"{node.url}/v1/sessions/{session_id(c)}/speech",
                                       allow_redirects=False) as r:
                    assert r.status == 200 and (await r.json()) == {"interrupted": 0}
                # the events stream, proxied as it is written (SSE)
                async with http.get(f"{node.url}/v1/sessions/{session_id(c)}/events") as events:
                    assert events.headers["Content-Type"] == "text/event-stream"
                    first = await asyncio.wait_for(events.content.readline(), 5)
                    assert first.startswith(b": events of session " + session_id(c).encode())
                    said = await c.say("Hello.", voice="tone")
                    seen = b""
                    while b'"state": "done"' not in seen and b'"state":"done"' not in seen:
                        seen += await asyncio.wait_for(events.content.readline(), 10)
                assert said.utterance["location"].startswith(c.session_url + "/speech/")
                assert (await c.wait_utterance(said.utterance["id"]))["state"] == "done"
            async with http.get(f"{node.url}/v1/sessions/nosuchworker-abc") as r:
                assert r.status == 404 and (await r.json())["error"]["code"] == "unknown_session"
            health = node.health()
            assert sorted(w["sessions"] for w in health["workers"]) == [1, 1]
        finally:
            await close_all(clients)


@pytest.mark.browser
async def test_the_demo_page_through_the_public_port(lone_node, page):  # noqa: F811
    """Chromium on the public port's page: its session lives on a worker (another origin: the
    page calls the worker's absolute Location directly, CORS), and it hears the tone."""
    from tests.browser.conftest import connect as connect_page
    from tests.browser.conftest import open_demo, wait_stats
    from tests.browser.conftest import speak as speak_page

    await open_demo(page, lone_node.url)
    await connect_page(page)
    session_url = await page.evaluate("window.gatewayDemo.sessionUrl")
    assert URL(session_url).port in lone_node.worker_ports, session_url
    candidates = await page.evaluate("window.gatewayDemo.candidates")
    assert candidates["patches"] >= 1 and not candidates["patchErrors"], candidates
    await speak_page(page, "A tone, please.", voice="tone")
    heard = await wait_stats(page, "s.audioLevel > 0.05")
    assert heard["packetsReceived"] > 0


def test_without_redis_sigterm_drains_and_exits_0(lone_node):
    node = lone_node
    pids = [w["pid"] for w in node.health()["workers"]]
    assert node.stop() == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
