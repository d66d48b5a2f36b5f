"""A stand-in CosyVoice server speaking both official protocols on loopback, for tests and demos.

    python -m gateway.testing.cosyvoice_server --http-port 50000 --grpc-port 50001

HTTP is the FastAPI server's wire behaviour (``runtime/python/fastapi/server.py``): GET or POST
``/inference_{sft,zero_shot,cross_lingual,instruct,instruct2}`` with form fields (urlencoded or
multipart, parsed whatever the method), FastAPI's 422 JSON for missing fields, 404/405 JSON, and
a 200 reply of headerless int16 PCM streamed with chunked encoding (no Content-Length). Unlike
uvicorn, aiohttp labels the stream ``application/octet-stream``. gRPC is
``cosyvoice.CosyVoice/Inference`` streaming ``Response.tts_audio`` int16 bytes.

Audio comes from a pluggable source (deterministic synthetic buzz by default, or the embedded
Piper voice), cut into ``chunk_bytes`` pieces (odd sizes split samples). Tests drive it in-process
through ``CosyVoiceStandIn``: its ``config`` (rate, chunk size, delays, fork options) can be changed
between requests, ``faults`` injects failures, ``gate`` holds a stream after its first chunk, and
``requests`` records what each client sent and how each exchange ended.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import grpc
import numpy as np
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gateway.testing.cosyvoice_audio import AudioSource, SyntheticSource
from gateway.testing.cosyvoice_form import ENDPOINTS, FormPart, parse_form, validation_errors
from gateway.testing.stand_in import FaultSchedule
from gateway.tts.cosyvoice_pb import cosyvoice_pb2 as pb
from gateway.tts.cosyvoice_pb import cosyvoice_pb2_grpc as pb_grpc

Fault = Literal["refuse", "http500", "http422", "timeout_before_first", "cut_mid_stream"]
FAULTS: tuple[str, ...] = get_args(Fault)
GRPC_PATH = "/cosyvoice.CosyVoice/Inference"
_ONEOF_MODES = {"sft_request": "sft", "zero_shot_request": "zero_shot",
                "cross_lingual_request": "cross_lingual", "instruct_request": "instruct"}


@dataclass
class StandInConfig:
    """Behaviour knobs; change them on ``CosyVoiceStandIn.config`` between requests."""

    sample_rate: int = 22050
    chunk_bytes: int = 8820
    first_chunk_delay_ms: float = 0.0
    chunk_delay_ms: float = 0.0
    methods: tuple[str, ...] = ("GET", "POST")
    # Fork emulation (HTTP): endpoints under a prefix such as "/stream", float32 samples, and
    # an X-Custom-Header-sampleRate reply header.
    path_prefix: str = ""
    sample_format: Literal["s16", "f32"] = "s16"
    rate_header: bool = False


@dataclass(eq=False)
class ReceivedRequest:
    """One request as the stand-in saw it, and how the exchange ended.

    ``outcome``: pending, completed, cancelled (client went away), fault (injected), rejected
    (404/405/422/400). ``closed``: HTTP -- the TCP connection carrying it closed; gRPC -- the
    RPC terminated. ``sent`` is every body byte written, in wire format.
    """

    protocol: Literal["http", "grpc"]
    method: str
    path: str
    mode: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, FormPart] = field(default_factory=dict)
    prompt_audio: bytes | None = None
    fault: Fault | None = None
    status: int | str | None = None
    outcome: str = "pending"
    sent: bytearray = field(default_factory=bytearray)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def end(self, outcome: str) -> None:
        if self.outcome == "pending":
            self.outcome = outcome


class _TrackingServer(web.Server):
    """aiohttp's low-level server, cancelling handlers on disconnect and reporting closes."""

    def __init__(self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
                 on_lost: Callable[[RequestHandler], None]) -> None:
        super().__init__(handler, handler_cancellation=True)
        self._on_lost = on_lost

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._on_lost(handler)


class _Servicer(pb_grpc.CosyVoiceServicer):
    def __init__(self, standin: CosyVoiceStandIn) -> None:
        self._standin = standin

    async def Inference(self, request: pb.Request, context: grpc.aio.ServicerContext) -> None:
        await self._standin._serve_grpc(request, context)


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return web.Response(status=status, body=text.encode(), headers=headers,
                        content_type="application/json")


def _check_loopback(host: str) -> None:
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"the stand-in binds loopback only, not {host!r}")


class CosyVoiceStandIn(FaultSchedule):
    FAULTS = FAULTS
    """In-process stand-in CosyVoice server (HTTP via aiohttp.web, gRPC via grpc.aio)."""

    def __init__(self, config: StandInConfig | None = None, *, source: AudioSource | None = None,
                 host: str = "127.0.0.1", http_port: int | None = 0,
                 grpc_port: int | None = 0) -> None:
        _check_loopback(host)
        self.config = config or StandInConfig()
        self.source: AudioSource = source or SyntheticSource()
        self.host = host
        self.requests: list[ReceivedRequest] = []
        #: When set to an Event, every stream pauses after its first chunk until it is set.
        self.gate: asyncio.Event | None = None
        self._ports = {"http": http_port, "grpc": grpc_port}
        self._by_conn: dict[RequestHandler, list[ReceivedRequest]] = {}
        self._runner: web.ServerRunner | None = None
        self._grpc: grpc.aio.Server | None = None
        self._stopping = asyncio.Event()
        self._arrival = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._ports["http"] is not None:
            self._runner = web.ServerRunner(_TrackingServer(self._http, self._conn_lost),
                                            shutdown_timeout=1.0)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, self._ports["http"])
            await site.start()
            self._ports["http"] = self._runner.addresses[0][1]
        if self._ports["grpc"] is not None:
            self._grpc = grpc.aio.server()
            pb_grpc.add_CosyVoiceServicer_to_server(_Servicer(self), self._grpc)
            address = f"{self._netloc}:{self._ports['grpc']}"
            self._ports["grpc"] = self._grpc.add_insecure_port(address)
            await self._grpc.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._grpc is not None:
            await self._grpc.stop(grace=0.5)
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> CosyVoiceStandIn:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def _netloc(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def http_url(self) -> str:
        return f"http://{self._netloc}:{self._ports['http']}"

    @property
    def grpc_target(self) -> str:
        return f"{self._netloc}:{self._ports['grpc']}"

    def _log(self, rec: ReceivedRequest) -> None:
        self.requests.append(rec)
        self._arrival.set()

    async def wait_requests(self, count: int = 1) -> list[ReceivedRequest]:
        """The first ``count`` requests, once that many have arrived."""
        while len(self.requests) < count:
            self._arrival.clear()
            await self._arrival.wait()
        return self.requests[:count]

    def _conn_lost(self, handler: RequestHandler) -> None:
        for rec in self._by_conn.pop(handler, []):
            rec.closed.set()

    # -- audio -------------------------------------------------------------------------------
    async def _wire_chunks(self, text: str, voice: str, f32: bool) -> AsyncIterator[bytes]:
        cfg = self.config
        size = max(1, cfg.chunk_bytes)
        buf = bytearray()
        async for piece in self.source.render(text, voice, cfg.sample_rate):
            if f32:
                piece = (np.frombuffer(piece, "<i2") / np.float32(32768)).astype("<f4").tobytes()
            buf += piece
            while len(buf) >= size:
                yield bytes(buf[:size])
                del buf[:size]
        if buf:
            yield bytes(buf)

    async def _send_audio(self, rec: ReceivedRequest, text: str, fault: Fault | None,
                          write: Callable[[bytes], Awaitable[None]], f32: bool = False) -> None:
        """Stream the utterance through ``write``; with cut_mid_stream stop halfway."""
        cfg = self.config
        voice = "|".join(f"{k}={v}" for k, v in sorted(rec.fields.items()) if k != "tts_text")
        voice += f"|prompt={len(rec.prompt_audio or b'')}"
        chunks = self._wire_chunks(text, voice, f32)
        budget: int | None = None
        if fault == "cut_mid_stream":
            whole = [c async for c in chunks]
            budget = max(1, sum(map(len, whole)) // 2)
            chunks = _aiter(whole)
        if cfg.first_chunk_delay_ms:
            await asyncio.sleep(cfg.first_chunk_delay_ms / 1000)
        async for chunk in chunks:
            if rec.sent and cfg.chunk_delay_ms:
                await asyncio.sleep(cfg.chunk_delay_ms / 1000)
            if budget is not None:
                chunk = chunk[: budget - len(rec.sent)]
            first = not rec.sent
            await write(chunk)
            rec.sent += chunk
            if first and self.gate is not None:
                await self.gate.wait()
            if budget is not None and len(rec.sent) >= budget:
                return

    # -- HTTP --------------------------------------------------------------------------------
    async def _http(self, request: web.BaseRequest) -> web.StreamResponse:
        rec = ReceivedRequest("http", request.method, request.path, headers=dict(request.headers))
        self._log(rec)
        self._by_conn.setdefault(request.protocol, []).append(rec)
        try:
            return await self._serve_http(request, rec)
        except (asyncio.CancelledError, ConnectionResetError):
            rec.end("cancelled")
            raise
        finally:
            rec.end("completed")
            rec.finished.set()

    async def _serve_http(self, request: web.BaseRequest,
                          rec: ReceivedRequest) -> web.StreamResponse:
        cfg = self.config
        rec.body = await request.read()
        prefix = cfg.path_prefix + "/inference_"
        mode = request.path[len(prefix):] if request.path.startswith(prefix) else None
        if mode not in ENDPOINTS:
            return self._reject(rec, _json(404, {"detail": "Not Found"}))
        rec.mode = mode
        if request.method not in cfg.methods:
            allow = {"Allow": ", ".join(cfg.methods)}
            return self._reject(rec, _json(405, {"detail": "Method Not Allowed"}, allow))
        try:
            rec.fields, rec.files = parse_form(request.headers.get("Content-Type", ""), rec.body)
        except (ValueError, UnicodeDecodeError):
            return self._reject(rec, _json(400, {"detail": "There was an error parsing the body"}))
        if "prompt_wav" in rec.files:
            rec.prompt_audio = rec.files["prompt_wav"].data
        rec.fault = fault = self._next_fault()
        if fault == "refuse":
            return await self._drop_connection(request, rec)
        errors = validation_errors(mode, rec.fields, rec.files)
        if fault == "http422":
            errors = errors or validation_errors(mode, {}, {})[:1]
        if errors:
            return self._reject(rec, _json(422, {"detail": errors}), "fault" if fault else None)
        if fault == "http500":
            rec.status, rec.outcome = 500, "fault"
            return web.Response(status=500, text="Internal Server Error")
        headers = {"Server": "uvicorn"}
        if cfg.rate_header:
            headers["X-Custom-Header-sampleRate"] = str(cfg.sample_rate)
        resp = web.StreamResponse(status=200, headers=headers)
        rec.status = 200
        await resp.prepare(request)
        if fault == "timeout_before_first":
            rec.outcome = "fault"
            await self._stopping.wait()
            return resp
        await self._send_audio(rec, rec.fields["tts_text"], fault, resp.write,
                               f32=cfg.sample_format == "f32")
        if fault == "cut_mid_stream":
            return await self._drop_connection(request, rec)
        await resp.write_eof()
        return resp

    def _reject(self, rec: ReceivedRequest, resp: web.Response,
                outcome: str | None = None) -> web.Response:
        rec.status = resp.status
        rec.end(outcome or "rejected")
        return resp

    async def _drop_connection(self, request: web.BaseRequest,
                               rec: ReceivedRequest) -> web.StreamResponse:
        """Close the socket without finishing the reply; disconnect cancels this handler."""
        rec.end("fault")
        if request.transport is not None:
            request.transport.close()
        await self._stopping.wait()
        raise ConnectionResetError("stand-in dropped the connection")

    # -- gRPC --------------------------------------------------------------------------------
    async def _serve_grpc(self, request: pb.Request, context: grpc.aio.ServicerContext) -> None:
        which = request.WhichOneof("RequestPayload") or "instruct_request"  # as server.py does
        msg = getattr(request, which)
        rec = ReceivedRequest("grpc", "POST", GRPC_PATH, mode=_ONEOF_MODES[which],
                              body=request.SerializeToString())
        rec.fields = {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields
                      if f.name != "prompt_audio"}
        if "prompt_audio" in msg.DESCRIPTOR.fields_by_name:
            rec.prompt_audio = msg.prompt_audio
        self._log(rec)
        context.add_done_callback(lambda _ctx: rec.closed.set())
        rec.fault = fault = self._next_fault()
        aborts = {"refuse": (grpc.StatusCode.UNAVAILABLE, "injected fault: refuse"),
                  "http500": (grpc.StatusCode.UNKNOWN, "Exception iterating responses: injected"),
                  "http422": (grpc.StatusCode.INVALID_ARGUMENT, "injected fault: http422")}
        try:
            if fault in aborts:
                code, details = aborts[fault]
                rec.status, rec.outcome = code.name, "fault"
                await context.abort(code, details)
            rec.status = "OK"
            if fault == "timeout_before_first":
                rec.outcome = "fault"
                await self._stopping.wait()
                return
            await self._send_audio(rec, msg.tts_text, fault,
                                   lambda c: context.write(pb.Response(tts_audio=c)))
            if fault == "cut_mid_stream":
                rec.status, rec.outcome = "UNAVAILABLE", "fault"
                await context.abort(grpc.StatusCode.UNAVAILABLE, "injected fault: stream cut")
        except asyncio.CancelledError:
            rec.end("cancelled")
            raise
        finally:
            rec.end("completed")
            rec.finished.set()


async def _aiter(items: list[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def main(argv: list[str] | None = None) -> None:
    from gateway.testing import cosyvoice_audio

    sources = ["synthetic", *(["piper"] if cosyvoice_audio.piper_available() else [])]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    p.add_argument("--http-port", type=int, default=50000, help="-1: no HTTP server")
    p.add_argument("--grpc-port", type=int, default=50001, help="-1: no gRPC server")
    p.add_argument("--source", choices=sources, default="synthetic")
    p.add_argument("--rate", type=int, default=22050, help="output sample rate")
    p.add_argument("--chunk-bytes", type=int, default=8820)
    p.add_argument("--first-chunk-delay-ms", type=float, default=0.0)
    p.add_argument("--chunk-delay-ms", type=float, default=0.0)
    p.add_argument("--fault", choices=FAULTS, default=None, help="inject into every request")
    args = p.parse_args(argv)
    config = StandInConfig(sample_rate=args.rate, chunk_bytes=args.chunk_bytes,
                           first_chunk_delay_ms=args.first_chunk_delay_ms,
                           chunk_delay_ms=args.chunk_delay_ms)

    async def serve() -> None:
        source = cosyvoice_audio.piper_source() if args.source == "piper" else None
        standin = CosyVoiceStandIn(config, source=source, host=args.host,
                                   http_port=None if args.http_port < 0 else args.http_port,
                                   grpc_port=None if args.grpc_port < 0 else args.grpc_port)
        standin.faults = args.fault
        async with standin:
            print(f"CosyVoice stand-in: http {standin.http_url}  grpc {standin.grpc_target}"
                  f"  ({args.source}, {args.rate} Hz)", flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
