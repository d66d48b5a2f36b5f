"""A real third-party WHEP client in Chromium, from another origin: medooze's ``whip-whep``
(fetched from the npm registry by ``npm pack``: Debian's npm, which .ci/install-debian.sh
installs; served as the package ships it: an ES module)
on a tiny player page served by a second aiohttp server (another port of 127.0.0.1, so another
origin: every request is CORS). Its ``WHEPClient`` ``view()``s the gateway's ``POST
/v1/sessions``, trickles its candidates by PATCH, hears the audio, restarts ICE (``restart()``:
PATCH with ``If-Match: *``, 200 + the gateway's sdpfrag and new ETag) and ``stop()``s (DELETE)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.installed import missing

pytestmark = pytest.mark.browser

PACKAGE = "whip-whep@1.2.0"  # pinned: the version this was checked against
PLAYER = Path(__file__).parent / "whep_player"
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="session")
def whip_whep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's files (``npm pack``: no install scripts run), once per test session."""
    npm = shutil.which("npm")
    if npm is None:
        missing("npm", f"the WHEP client ({PACKAGE}) comes from the npm registry")
    dest = tmp_path_factory.mktemp("whip-whep")
    try:
        done = subprocess.run([npm, "pack", PACKAGE, "--pack-destination", str(dest)],
                              cwd=dest, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        missing("the npm registry", f"npm pack {PACKAGE} timed out")
    tarballs = list(dest.glob("whip-whep-*.tgz"))
    if done.returncode != 0 or not tarballs:
        missing("the npm registry", f"npm pack {PACKAGE} failed: {done.stderr.strip()[-400:]}")
    with tarfile.open(tarballs[0]) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python < 3.11.4 (Debian 12's is 3.11.2) has no filter: the same refusal by hand
            for member in tar.getmembers():
                inside = (dest / member.name).resolve().is_relative_to(dest.resolve())
                assert inside and (member.isfile() or member.isdir()), member.name
            tar.extractall(dest)  # every member checked above
    package = dest / "package"
    assert (package / "whep.js").is_file(), sorted(p.name for p in package.iterdir())
    return package


@pytest.fixture
async def player_origin(whip_whep: Path) -> AsyncIterator[str]:
    """The player page and the library, from an origin other than the gateway's."""
    app = web.Application()

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(PLAYER / "index.html")

    async def script(request: web.Request) -> web.FileResponse:
        return web.FileResponse(PLAYER / "player.js",
                                headers={"Content-Type": "text/javascript"})

    app.router.add_get("/", index)
    app.router.add_get("/player.js", script)
    app.router.add_static("/lib/", whip_whep)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    try:
        yield f"http://{LOOPBACK}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class Exchanges:
    """The page's requests to the gateway, as Chromium made them and got their answers."""

    def __init__(self, page: Any, gateway_url: str) -> None:
        self.responses: list[Any] = []
        self.changed = asyncio.Event()

        def on_response(response: Any) -> None:
            if response.url.startswith(gateway_url):
                self.responses.append(response)
                self.changed.set()

        page.on("response", on_response)

    async def of(self, method: str) -> list[dict[str, Any]]:
        out = []
        for r in self.responses:
            if r.request.method != method:
                continue
            headers = await r.all_headers()
            body = None
            if headers.get("content-type", "").startswith("application/json"):
                try:
                    body = await r.json()
                except Exception:  # the body may be gone already
                    body = None
            out.append({"status": r.status, "request": await r.request.all_headers(),
                        "body": r.request.post_data or "", "headers": headers, "json": body})
        return out

    async def until(self, method: str, test: Any, timeout: float = 20.0) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            while True:
                for exchange in await self.of(method):
                    if test(exchange):
                        return exchange
                self.changed.clear()
                await self.changed.wait()

        return await asyncio.wait_for(wait(), timeout)


async def wait_stats(page: Any, condition: str, timeout_ms: int = 20_000) -> dict[str, Any]:
    return await page.evaluate(
        """async ([condition, timeout]) => {
            const test = new Function("s", `return (${condition});`);
            const started = performance.now();
            for (;;) {
                const s = await window.player.stats();
                if (test(s)) return s;
                if (performance.now() - started > timeout) {
                    throw new Error(`stats never met ${condition}: ${JSON.stringify(s)}`);
                }
                await new Promise((resolve) => setTimeout(resolve, 100));
            }
        }""",
        [condition, timeout_ms],
    )


async def test_medooze_whep_client_views_restarts_and_stops(start_gateway, page, player_origin):
    gw = await start_gateway()  # CORS on by default (--cors-origins *)
    assert player_origin.split(":")[-1] != gw.url.split(":")[-1]  # another origin
    exchanges = Exchanges(page, gw.url)
    await page.goto(player_origin + "/")
    await page.wait_for_function("() => window.player !== undefined")

    # view(): POST the offer (no candidates in it: the library trickles them all)
    viewed = await page.evaluate("(url) => window.player.view(url)", gw.url + "/v1/sessions")
    (post,) = await exchanges.of("POST")
    assert post["status"] == 201, post
    assert post["headers"]["access-control-allow-origin"] in ("*", player_origin)
    session_id = viewed["resource"].rstrip("/").split("/")[-1]
    session = gw.registry.get(session_id)
    assert session is not None and viewed["resource"] == gw.url + f"/v1/sessions/{session_id}"
    first_etag = post["headers"]["etag"]
    assert first_etag == session.webrtc.etag

    # trickle: the client PATCHes its candidates (no If-Match: it has no ETag yet) -> 204
    trickled = await exchanges.until(
        "PATCH", lambda e: "a=candidate:" in e["body"] and e["status"] == 204)
    assert "if-match" not in trickled["request"], trickled
    await page.wait_for_function("() => window.player.pc.connectionState === 'connected'")
    before = await page.evaluate("window.player.stats()")

    # audio: the gateway speaks (30 s "long" voice, 330 Hz): level > 0 on the remote track
    async with gw.http.post(f"{viewed['resource']}/speech",
                            json={"text": "Across the restart.", "voice": "long"}) as r:
        assert r.status == 202, await r.text()
    await page.wait_for_function("() => window.player.level() > 0.05")
    playing = await wait_stats(page, "s.packetsReceived > 50")

    # restart(): new ICE credentials PATCHed with If-Match "*" -> 200, sdpfrag, a new ETag
    restarted = await page.evaluate("window.player.restart()")
    restart = await exchanges.until("PATCH", lambda e: e["request"].get("if-match") == "*")
    assert restart["status"] == 200, restart
    new_etag = restart["headers"]["etag"]
    assert new_etag != first_etag and new_etag == session.webrtc.etag
    assert restarted["etag"] == new_etag  # the library read the ETag (CORS exposes it)
    assert session.webrtc.ice_generation == 1
    after = await wait_stats(
        page, f"s.iceLocalUfrag && s.iceLocalUfrag !== {before['iceLocalUfrag']!r} && "
              f"s.packetsReceived > {playing['packetsReceived']} + 100")
    assert after["localUfrag"] != before["localUfrag"]  # Chromium's new credentials...
    assert after["remoteUfrag"] != before["remoteUfrag"]  # ...and the gateway's, from the 200
    assert after["iceLocalUfrag"] == after["localUfrag"]  # ICE runs on the new ones
    assert session.webrtc.remote_ufrag == after["localUfrag"]  # and so does the gateway
    assert after["connectionState"] == "connected"
    await page.wait_for_function("() => window.player.level() > 0.05")  # still audible
    # candidates gathered after the restart went up with the new ETag
    later = [e for e in await exchanges.of("PATCH")
             if e["request"].get("if-match") == new_etag and "a=candidate:" in e["body"]]
    assert all(e["status"] == 204 for e in later), later

    # stop(): DELETE -> 204, and the gateway has no session left
    await page.evaluate("window.player.stop()")
    deleted = await exchanges.until("DELETE", lambda e: True)
    # stop() closes the peer connection FIRST and DELETEs after: the gateway may have reaped the
    # session on the peer's DTLS close already; a DELETE of a just-ended session is still a 204
    assert deleted["status"] == 204, deleted
    for _ in range(100):
        if len(gw.registry) == 0:
            break
        await asyncio.sleep(0.05)
    assert len(gw.registry) == 0
    async with gw.http.get(f"{gw.url}/healthz") as r:
        assert (await r.json())["sessions"] == 0
    assert await page.evaluate("window.player.errors") == []
    print(f"\nwhip-whep from {player_origin}: ETag {first_etag} -> {new_etag}; packets "
          f"{playing['packetsReceived']} before the restart, {after['packetsReceived']} after; "
          f"{len(await exchanges.of('PATCH'))} PATCHes ({len(later)} after the restart); "
          f"DELETE {deleted['status']} (session {session.close_reason!r})")
