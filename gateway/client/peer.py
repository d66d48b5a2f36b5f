"""A headless WebRTC listener for the gateway's WHEP-style API, built on aiortc.

It offers recvonly audio (sendrecv with a microphone track: ``connect(mic=...)``), posts the
offer as ``application/sdp``, taps raw RTP (no aiortc jitter
buffer or decoder) and asks for speech through the HTTP API. Every packet goes to the raw
capture (``capture``: counts and the newest sequence number for the ``wait_*`` calls; the
packets themselves only with ``capture=True`` or a bound) and, with ``receive_path``, to our own
receive path (``receive``: jitter buffer, NACK, FEC/PLC, real-time playout; its recording and
period log are opt-in in its ``ReceivePathConfig``). ``impairment`` degrades the datagrams this peer
receives (``outgoing_impairment``: the ones it sends, NACKs included), in-process and seeded.

``red`` (default on) offers RFC 2198 RED over Opus as Chromium does (``red_sdp``); when the
answer takes it, RED packets reach the receive path as RED (its redundant copies fill lost
frames) and the capture as sent, while aiortc's own statistics (its receiver reports) see them
as the Opus packets they carry (their primary, under the Opus payload type).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from gateway import aiortc_compat
from gateway.client.capture import DEFAULT_MAX_PACKETS, RtpCapture
from gateway.client.red_sdp import answered_red, offer_red
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.rtp import red as rfc2198
from gateway.testing.impairment import ImpairedSendto, ImpairmentConfig, wrap_sendto

RtpListener = Callable[[Any, int], None]


class GatewayError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


@dataclass
class SpeechResult:
    utterance: dict[str, Any]
    said_at: float


class GatewayClient:
    def __init__(
        self,
        base_url: str,
        http: aiohttp.ClientSession | None = None,
        *,
        receive_path: ReceivePathConfig | bool = False,
        impairment: ImpairmentConfig | None = None,
        outgoing_impairment: ImpairmentConfig | None = None,
        aiortc_decoder: bool = False,
        capture: bool | int = False,
        red: bool = True,
    ) -> None:
        """``receive_path``: True for the default config (nothing recorded), or a config.
        ``aiortc_decoder``: keep aiortc's own jitter buffer and decoder running too (its
        track, ``receiver.track``, then yields decoded frames), for comparisons. ``capture``:
        keep the raw packets, up to 90,000 (True) or the number given. ``red``: offer RFC 2198
        RED (the gateway sends it while we report loss, or always with ``--no-red-adaptive``)."""
        self.base_url = base_url.rstrip("/")
        self._http = http
        self._own_http = http is None
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        max_packets = DEFAULT_MAX_PACKETS if capture is True else int(capture)
        self.capture = RtpCapture(max_packets)
        self.receive: ReceivePath | None = None
        if receive_path:
            config = receive_path if isinstance(receive_path, ReceivePathConfig) else None
            self.receive = ReceivePath(config, self._send_rtcp, self._rtcp_ssrc)
        self.impairment = impairment
        self.outgoing_impairment = outgoing_impairment
        self.impaired_in: ImpairedSendto | None = None
        self.impaired_out: list[ImpairedSendto] = []
        self._aiortc_decoder = aiortc_decoder
        self.offer_red = red
        self.red_payload_type: int | None = None  # negotiated RED (over opus_payload_type)
        self.opus_payload_type: int | None = None
        self._listeners: list[RtpListener] = [self.capture.on_packet]
        if self.receive is not None:
            self._listeners.append(self.receive.on_rtp)
        self.transceiver: Any = None
        self.session_url: str | None = None
        self.connect_ms: float | None = None
        self.answer_sdp: str | None = None
        self._connected = asyncio.Event()
        self._failed = asyncio.Event()

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        return self._http

    async def _check(self, response: aiohttp.ClientResponse) -> Any:
        if response.content_type == "application/json":
            body = await response.json()
        else:
            body = await response.text()
        if response.status >= 400:
            raise GatewayError(response.status, body)
        return body

    def add_rtp_listener(self, listener: RtpListener) -> None:
        """Also call ``listener(packet, arrival_time_ms)`` for every RTP packet received."""
        self._listeners.append(listener)

    def _on_rtp(self, packet: Any, arrival_time_ms: int) -> None:
        for listener in self._listeners:
            listener(packet, arrival_time_ms)
        if self.red_payload_type is not None and packet.payload_type == self.red_payload_type:
            # aiortc knows no RED: let it count (and, if asked, decode) the Opus packet inside
            with contextlib.suppress(rfc2198.MalformedRed):
                packet.payload = rfc2198.primary(packet.payload)
            packet.payload_type = self.opus_payload_type

    def _use_red(self, answer: str) -> None:
        negotiated = answered_red(answer) if self.offer_red else None
        if negotiated is None:
            return
        self.red_payload_type, self.opus_payload_type = negotiated
        aiortc_compat.accept_payload_type(self.transceiver.receiver, self.red_payload_type)
        self.capture.red_payload_type = self.red_payload_type
        if self.receive is not None:
            self.receive.red_payload_type = self.red_payload_type

    async def _send_rtcp(self, data: bytes) -> bool:
        if self.transceiver is None:
            return False
        return await aiortc_compat.send_receiver_rtcp(self.transceiver.receiver, data)

    def _rtcp_ssrc(self) -> int | None:
        if self.transceiver is None:
            return None
        return aiortc_compat.receiver_rtcp_ssrc(self.transceiver.receiver)

    async def send_rtcp(self, data: bytes) -> bool:
        """Send raw RTCP bytes to the gateway through this peer's SRTCP path."""
        return await self._send_rtcp(data)

    def _impair(self) -> None:
        loop = asyncio.get_running_loop()
        transport = self.transceiver.receiver.transport
        if self.impairment is not None:
            config = self.impairment

            def wrap_in(deliver: aiortc_compat.Deliver) -> aiortc_compat.Deliver:
                self.impaired_in = wrap_sendto(deliver, loop, config)
                return self.impaired_in

            aiortc_compat.impair_incoming(transport, wrap_in)
        if self.outgoing_impairment is not None:
            out_config = self.outgoing_impairment

            def wrap_out(sendto: aiortc_compat.Deliver) -> aiortc_compat.Deliver:
                impaired = wrap_sendto(sendto, loop, out_config)
                self.impaired_out.append(impaired)
                return impaired

            aiortc_compat.impair_outgoing(transport, wrap_out)

    async def connect(self, timeout: float = 10.0, mic: MediaStreamTrack | None = None) -> None:
        """Offer recvonly audio, or with ``mic`` (an audio track) sendrecv: the gateway (run
        with ``--duplex``) then hears the track as the user's microphone."""
        started = time.monotonic()
        if mic is not None:
            transceiver = self.pc.addTransceiver(mic, direction="sendrecv")
        else:
            transceiver = self.pc.addTransceiver("audio", direction="recvonly")
        self.transceiver = transceiver
        aiortc_compat.tap_rtp(
            transceiver.receiver, self._on_rtp, bypass_decoder=not self._aiortc_decoder
        )
        if self.receive is not None:
            self.receive.start()

        @self.pc.on("connectionstatechange")
        def on_state() -> None:
            if self.pc.connectionState == "connected":
                self._connected.set()
            elif self.pc.connectionState in ("failed", "closed"):
                self._failed.set()

        aiortc_compat.tolerate_late_consent(self.pc)  # a late consent answer still counts
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = self.pc.localDescription.sdp
        async with self.http.post(
            f"{self.base_url}/v1/sessions",
            data=offer_red(offer) if self.offer_red else offer,
            headers={"Content-Type": "application/sdp"},
        ) as response:
            answer = await self._check(response)
            self.session_url = self.base_url + response.headers["Location"]
        self.answer_sdp = answer
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        self._use_red(answer)
        waiters = {
            asyncio.ensure_future(self._connected.wait()),
            asyncio.ensure_future(self._failed.wait()),
        }
        try:
            await asyncio.wait(
                waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for w in waiters:
                w.cancel()
        if not self._connected.is_set():
            raise ConnectionError(f"peer connection {self.pc.connectionState} after connect")
        self.connect_ms = (time.monotonic() - started) * 1000
        self._impair()  # after DTLS: the handshake itself is not impaired

    async def say(
        self, text: str, voice: str | None = None, interrupt: bool = False
    ) -> SpeechResult:
        body: dict[str, Any] = {"text": text, "interrupt": interrupt}
        if voice:
            body["voice"] = voice
        said_at = time.monotonic()
        async with self.http.post(f"{self.session_url}/speech", json=body) as response:
            utterance = await self._check(response)
        return SpeechResult(utterance, said_at)

    async def wait_utterance(self, utterance_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the utterance finished on the server and its last packet arrived here."""
        url = f"{self.session_url}/speech/{utterance_id}"
        async with self.http.get(url, params={"wait": "1", "timeout": str(timeout)}) as response:
            state = await self._check(response)
        if state.get("last_seq") is not None:
            await asyncio.wait_for(self.capture.wait_for_seq(state["last_seq"]), timeout=5.0)
        return state

    async def interrupt(self) -> int:
        async with self.http.delete(f"{self.session_url}/speech") as response:
            return int((await self._check(response))["interrupted"])

    async def state(self) -> dict[str, Any]:
        async with self.http.get(self.session_url) as response:
            return await self._check(response)

    async def close(self, delete: bool = True) -> None:
        if delete and self.session_url is not None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.http.delete(self.session_url) as response:
                    await response.read()
        if self.receive is not None:
            await self.receive.close()
        for impaired in [self.impaired_in, *self.impaired_out]:
            if impaired is not None:
                impaired.close()
        await self.pc.close()
        if self._own_http and self._http is not None:
            await self._http.close()
