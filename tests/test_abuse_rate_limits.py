"""Issue 23, rate limits on every route that does work, shared by a node's workers: through a
real supervisor with ``--workers 2`` (no Redis: the node's shared file), the buckets of two
processes are one; with Redis, two gateways sharing it share them; GET routes count."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from bench.cluster import free_range
from gateway.api.rate_store import SharedFileBuckets, create_shared
from tests.installed import needs
from tests.test_api import CHROMIUM

SDP = {"Content-Type": "application/sdp"}
_CHARGE = """
import sys
from gateway.api.rate_store import SharedFileBuckets
store = SharedFileBuckets(sys.argv[1])
print(sum(store.charge("sessions", "10.0.0.1", 0.01) == 0 for _ in range(20)))
"""


def test_two_processes_charge_the_same_shared_buckets(tmp_path):
    path = str(tmp_path / "rate")
    create_shared(path)
    runs = [subprocess.run([sys.executable, "-c", _CHARGE, path], capture_output=True,
                           text=True, check=True, cwd=Path(__file__).parent.parent)
            for _ in range(2)]
    # a burst of 1 at 0.01/s: one request of the 40 passes, whichever process it was
    assert sum(int(r.stdout) for r in runs) == 1
    other = SharedFileBuckets(path)
    assert other.charge("sessions", "10.0.0.2", 0.01) == 0  # another client: its own bucket
    other.close()


async def _statuses(http: aiohttp.ClientSession, urls: list[str]) -> list[int]:
    out = []
    for url in urls:
        async with http.post(url, data=CHROMIUM, headers=SDP, allow_redirects=False) as r:
            await r.read()
            out.append(r.status)
            if r.status == 201:
                location = r.headers["Location"]
                if location.startswith("/"):
                    location = url.rsplit("/v1/", 1)[0] + location
                async with http.delete(location) as d:
                    assert d.status == 204
    return out


@pytest.mark.timeout(90)
async def test_workers_of_a_node_share_the_session_limit():
    base = free_range(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "VOICE_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(base),
         "--workers", "2", "--ice-hosts", "127.0.0.1", "--voice", "tone:440",
         "--rate-limit-sessions", "0.1"],  # a burst of 1, one more every 10 s
        env=env, cwd=Path(__file__).parent.parent,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                try:  # every worker serving, as the supervisor sees it (it places on them)
                    async with http.get(f"http://127.0.0.1:{base}/healthz") as r:
                        workers = (await r.json())["workers"]
                    if all(w["state"] == "serving" and w["max_sessions"] for w in workers):
                        break
                except (aiohttp.ClientError, ValueError, KeyError):
                    pass
                assert time.monotonic() < deadline, "the node did not start"
                await asyncio.sleep(0.5)
            # through the public port (placed on either worker) and on each worker's own port
            urls = [f"http://127.0.0.1:{port}/v1/sessions"
                    for port in (base, base + 1, base + 2) * 3]
            statuses = await _statuses(http, urls)
    finally:
        proc.terminate()
        proc.wait(30)
    # per-process buckets let one through per worker; the node's shared ones, one in all
    assert statuses.count(201) == 1, statuses
    assert set(statuses) == {201, 429}, statuses


@needs("redis-server", shutil.which("redis-server") is not None, "the shared rate-limit buckets "
       "(Debian; .ci/install-debian.sh)")
async def test_gateways_sharing_redis_share_the_buckets(start_gateway, tmp_path):
    from bench.common import free_port
    from tests.test_cluster import RedisServer

    redis = RedisServer(free_port(), tmp_path / "redis.log")
    try:
        redis.start()  # until it answers PING (a fixed sleep was a race under load)
        one = await start_gateway(redis_url=redis.url, rate_limit_sessions=0.1)
        two = await start_gateway(redis_url=redis.url, rate_limit_sessions=0.1)
        urls = [f"{g.url}/v1/sessions" for g in (one, two, one, two)]
        statuses = await _statuses(one.http, urls)
    finally:
        redis.stop()
    assert statuses == [201, 429, 429, 429], statuses


async def test_get_routes_that_do_work_are_limited_and_open_ones_are_not(start_gateway):
    gateway = await start_gateway(rate_limit_requests=1.0)  # a burst of 2
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM,
                                 headers=SDP) as r:
        location = gateway.url + r.headers["Location"]
    statuses = []
    for _ in range(4):
        async with gateway.http.get(location) as r:
            statuses.append(r.status)
    assert statuses.count(429) >= 1 and statuses[0] == 200, statuses
    for _ in range(5):
        async with gateway.http.get(f"{gateway.url}/healthz") as r:
            assert r.status == 200
