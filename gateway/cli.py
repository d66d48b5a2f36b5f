"""``python -m gateway``: run the gateway."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from aiohttp import web

from gateway.api.app import create_app
from gateway.api.routes import REGISTRY, STALL_WATCH
from gateway.api.timeouts import connection_limits, guard_runner, serve_options
from gateway.cluster.supervisor import needs_supervisor, supervise
from gateway.cluster.worker import attach_worker
from gateway.config import GatewayConfig, parse_config
from gateway.runtime import logs
from gateway.runtime.stall_watch import StallWatch
from gateway.tts.registry import VoiceRegistry

log = logging.getLogger(__name__)


async def serve(config: GatewayConfig) -> None:
    voices = VoiceRegistry.from_specs(config.voices)  # loads models once, before serving
    app = create_app(config, voices)
    attach_worker(app, config)  # scale-out: id prefix, absolute Locations, a worker's load
    # handler_cancellation: a client that disconnects cancels its handler (an HTTP stream's
    # synthesis stops at once, not at its next write)
    limits = connection_limits(config)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                           **serve_options(limits))
    await runner.setup()
    guard_runner(runner, limits)  # header/body timeouts, the per-address cap (api/timeouts.py)
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    warmed = await voices.warm_up()  # the first utterance after start is not a cold one
    if warmed:
        log.info("voices warmed up: %s", ", ".join(f"{n} {s * 1000:.0f} ms"
                                                   for n, s in warmed.items()))
    app[REGISTRY].gc.freeze()  # models and start-up state are long-lived: out of the GC's sight
    if config.stall_warn_ms > 0:
        watch = StallWatch(config.stall_warn_ms / 1000)
        app[STALL_WATCH] = watch
        watch.start()
    shown = "127.0.0.1" if config.host in ("0.0.0.0", "") else config.host
    print(f"voice gateway on http://{shown}:{config.port}/  (demo page)", flush=True)
    print(f"  voices: {', '.join(voices.names)}; API: POST /v1/sessions", flush=True)
    stop = asyncio.Event()
    _on_signals(stop)
    try:
        await stop.wait()
        log.info("draining: no new sessions; playing speech may finish for up to %g s",
                 config.drain_timeout_s)
        await app[REGISTRY].drain(config.drain_timeout_s)
    finally:
        if STALL_WATCH in app:
            app[STALL_WATCH].stop()
        await runner.cleanup()
        await voices.close()


def _on_signals(stop: asyncio.Event) -> None:
    """SIGTERM or SIGINT: drain, then exit 0. A second one: exit at once."""
    loop = asyncio.get_running_loop()

    def first(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s received", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, first, signum)


def runner(event_loop: str) -> Callable[[Coroutine[Any, Any, None]], None]:
    """How to run the gateway's coroutine: with uvloop when chosen (or 'auto' and installed)."""
    if event_loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                raise SystemExit("error: --event-loop uvloop, but it is not installed") from None
        else:
            return uvloop.run
    return asyncio.run


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    logs.configure(config.log_level, config.log_format)
    run = runner(config.event_loop)
    logging.getLogger(__name__).info("event loop: %s", run.__module__)
    if needs_supervisor(config):  # --workers N > 1 or --redis-url: gateway.cluster.supervisor
        return supervise(config, sys.argv[1:] if argv is None else argv, run)
    try:
        run(serve(config))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
