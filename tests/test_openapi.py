"""The API document: every route described, rendered at /docs (Swagger UI's files from the
installed swagger-ui-bundle-v2 package), and checked by Schemathesis
against the live server (no 5xx; every response, 4xx JSON errors included, matches it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.common import free_port
from gateway.api.openapi import SWAGGER_UI_FILES, swagger_ui_file
from tests.installed import missing, needs
from tests.test_access import _healthy

ROOT = Path(__file__).resolve().parent.parent
# a channel's live streams never end: a fuzzed name ("0") that a fuzzed POST /v1/channels
# created would hold the run (tests/test_channels.py covers them)
ENDLESS_STREAMS = r"^/v1/channels/\{name\}/(listen|events)$"
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,response_headers_conformance")


async def test_every_route_is_described(gateway):
    async with gateway.http.get(f"{gateway.url}/openapi.json") as r:
        doc = await r.json()
    assert doc["openapi"] == "3.1.0"
    described = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    served = {
        (route.method, route.resource.canonical)
        for route in gateway.app.router.routes()
        if route.method not in ("HEAD", "*") and not route.resource.canonical.startswith("/web")
        and route.resource.canonical != "/"
    }
    assert served - described == set()
    for path, ops in doc["paths"].items():
        for op in ops.values():
            error = op["responses"]["4XX"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}, path
    voice = doc["components"]["schemas"]["SpeechCreate"]["properties"]["voice"]
    assert {"type": "string", "enum": ["tone", "tone48k", "long"]} in voice["anyOf"]


async def test_docs_load_swagger_ui_from_the_installed_package(gateway):
    async with gateway.http.get(f"{gateway.url}/docs") as r:
        page = await r.text()
        assert r.status == 200 and "/openapi.json" in page
    for name, media in SWAGGER_UI_FILES.items():
        assert f'"/docs/{name}"' in page
        if swagger_ui_file(name) is None:
            missing("swagger-ui-bundle-v2", f"Swagger UI's {name} for /docs")
        async with gateway.http.get(f"{gateway.url}/docs/{name}") as r:
            assert r.status == 200 and r.content_type == media
            assert await r.read() == swagger_ui_file(name).read_bytes()
    # any other name (or a path out of the package) is the API's JSON 404, never a file
    for name in ("index.html", "..%2F__init__.py", "swagger-ui-bundle.js.map"):
        async with gateway.http.get(f"{gateway.url}/docs/{name}") as r:
            assert r.status == 404, name
            assert (await r.json())["error"]["code"] == "not_found"


@needs("schemathesis", shutil.which("schemathesis", path=str(Path(sys.executable).parent))
       is not None, "a dev tool")
async def test_schemathesis_finds_nothing_against_the_live_server():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
         "--ice-hosts", "127.0.0.1", "--voice", "tone:440?seconds=0.1", "--log-level",
         "WARNING", "--max-text-chars", "500", "--max-channels", "256"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        await _healthy(port)
        st = Path(sys.executable).with_name("schemathesis")
        run = await asyncio.to_thread(
            subprocess.run,
            [str(st), "run", f"http://127.0.0.1:{port}/openapi.json", "--checks", CHECKS,
             "--max-examples", os.environ.get("SCHEMATHESIS_EXAMPLES", "30"), "--seed", "1",
             "--no-color",
             "--exclude-path-regex", ENDLESS_STREAMS],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
                 "PYTHONPATH": str(ROOT)},
        )
        assert run.returncode == 0, run.stdout[-6000:]
    finally:
        proc.kill()
        server_log = proc.stdout.read() if proc.stdout else ""
    # aiohttp's own parser logs what it refuses (a NUL in a header, say) with a traceback;
    # nothing of ours may raise
    assert f'File "{ROOT / "gateway"}' not in server_log, server_log[-4000:]
