"""``python -m gateway``: run the gateway."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from aiohttp import web

from gateway.config import GatewayConfig, parse_config
from gateway.http.app import create_app
from gateway.tts.registry import VoiceRegistry


async def serve(config: GatewayConfig) -> None:
    voices = VoiceRegistry.from_specs(config.voices)  # loads models once, before serving
    app = create_app(config, voices)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    shown = "127.0.0.1" if config.host in ("0.0.0.0", "") else config.host
    print(f"voice gateway on http://{shown}:{config.port}/  (demo page)", flush=True)
    print(f"  voices: {', '.join(voices.names)}; API: POST /v1/sessions", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await voices.close()


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
