"""Loss recovery end to end: real peers on 127.0.0.1, an in-process gateway, our receive path.

Impairment is in-process and seeded (``gateway.testing.impairment``) on the datagrams the client
receives (and, where said, sends). Nothing waits on a sleep: tests wait for playout periods,
played sequence numbers, arrivals or the server's ``?wait=1``.
"""

from __future__ import annotations

import asyncio
import random
import struct

import numpy as np
import pytest

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.media.framer import Framer
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.nack.rtcp import build_nack_packet
from gateway.receive.frame_decoder import FrameKind
from gateway.receive.receive_path import ReceivePathConfig
from gateway.rtp.seqnum import seq_add, seq_diff
from gateway.testing.impairment import ImpairedSendto, ImpairmentConfig, wrap_sendto
from tests.conftest import tone_voices

# the jitter buffer reacts to real-time arrival: lateness from a loaded CPU reads as network jitter
pytestmark = [pytest.mark.timeout(90), pytest.mark.serial]

# What was played is kept only when asked for: these tests look at it.
RECORDED = ReceivePathConfig(record_s=120.0, log_periods=6000)


async def listener(gateway, **options) -> GatewayClient:
    options.setdefault("receive_path", RECORDED)
    options.setdefault("capture", True)
    # NACK, FEC and PLC are measured here on their own (RED would rebuild most of these
    # losses first: tests/test_red_receive.py)
    options.setdefault("red", False)
    client = GatewayClient(gateway.url, gateway.http, **options)
    await client.connect()
    return client


async def speak(client: GatewayClient, voice: str = "tone") -> dict:
    """Say a tone and return the utterance state once its last frame has had its playout."""
    result = await client.say("A tone please.", voice=voice)
    state = await client.wait_utterance(result.utterance["id"])
    assert state["state"] == "done", state
    await asyncio.wait_for(client.receive.wait_played(state["last_seq"]), 5.0)
    return state


def speech_periods(client: GatewayClient, state: dict) -> list:
    """The playout periods of the utterance's frames, in order (the newest play of each seq)."""
    seqs = [seq_add(state["first_seq"], i) for i in range(state["frames_sent"])]
    by_seq = {p.seq: p for p in client.receive.played if p.seq is not None}
    missing = [s for s in seqs if s not in by_seq]
    assert not missing, (missing[:5], state, client.receive.stats)
    return [by_seq[s] for s in seqs]


def speech_pcm(client: GatewayClient, periods: list) -> np.ndarray:
    pcm = client.receive.played_pcm()
    return np.concatenate([pcm[p.index * FRAME_SAMPLES : (p.index + 1) * FRAME_SAMPLES]
                           for p in periods])


def expected_tone_payloads() -> list[bytes]:
    framer = Framer(FRAME_SAMPLES)
    pcm = tone_voices().get("tone").pcm()
    encoder = OpusFrameEncoder(EncoderSettings())
    return [encoder.encode(f) for f in framer.push(pcm) + framer.flush()]


async def nack_counters(client: GatewayClient) -> dict:
    return (await client.state())["nack"]


def rtp_seq(datagram: bytes) -> int | None:
    """Sequence number of an SRTP datagram (its header is in the clear); None for others."""
    if len(datagram) < 12 or datagram[0] >> 6 != 2 or 192 <= datagram[1] <= 223:
        return None
    return struct.unpack_from("!H", datagram, 2)[0]


class DropSeqsOnce:
    """Incoming wrapper: drop the first arrival of each RTP sequence number in ``seqs``."""

    def __init__(self, deliver, seqs: set[int]) -> None:
        self.deliver = deliver
        self.pending = set(seqs)
        self.dropped: list[int] = []

    def __call__(self, data: bytes, addr) -> None:
        seq = rtp_seq(data)
        if seq in self.pending:
            self.pending.discard(seq)
            self.dropped.append(seq)
            return
        self.deliver(data, addr)


class Phased:
    """Incoming wrapper: one impairment until ``calm()``, then another."""

    def __init__(self, deliver, first: ImpairmentConfig, then: ImpairmentConfig) -> None:
        loop = asyncio.get_running_loop()
        self.first: ImpairedSendto = wrap_sendto(deliver, loop, first)
        self.then: ImpairedSendto = wrap_sendto(deliver, loop, then)
        self.current = self.first

    def calm(self) -> None:
        self.current = self.then

    def __call__(self, data: bytes, addr) -> None:
        self.current(data, addr)

    def close(self) -> None:
        self.first.close()
        self.then.close()


class LoopLag:
    """Watches the shared event loop (gateway and client run on it): how long it stalled.

    A stalled loop stalls the gateway's sender and our playout clock alike; an underrun is the
    receive path's fault only when no stall explains it.
    """

    def __init__(self, step: float = 0.005) -> None:
        self.step = step
        self.stalls: list[float] = []
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(self.step)
            lag = loop.time() - started - self.step
            if lag > 0.020:
                self.stalls.append(lag)

    def explained_periods(self) -> int:
        """Playout periods a stall may have starved (one per 20 ms of stall, plus one)."""
        return sum(int(lag / 0.020) + 1 for lag in self.stalls)

    def close(self) -> None:
        self._task.cancel()


@pytest.fixture
async def loop_lag():
    lag = LoopLag()
    yield lag
    lag.close()


@pytest.fixture
async def clients():
    made: list[GatewayClient] = []
    yield made
    for client in made:
        await client.close()


# -- clean stream ----------------------------------------------------------------------------


async def test_clean_stream_plays_every_frame_as_sent(gateway, clients):
    client = await listener(gateway)
    clients.append(client)
    state = await speak(client)
    periods = speech_periods(client, state)
    assert [p.kind for p in periods] == [FrameKind.FRAME] * len(periods)
    assert [p.payload for p in periods] == expected_tone_payloads()
    # played in consecutive periods: no stall inside the utterance
    assert [p.index for p in periods] == list(range(periods[0].index, periods[-1].index + 1))
    stats = client.receive.stats
    assert (stats.lost, stats.concealed, stats.recovered_fec, stats.underrun_periods) == (0,) * 4
    assert stats.target_frames == 3  # 2 + one frame reserved for a NACK round trip
    assert 0 < stats.playout_delay_ms < 80


# -- random loss -----------------------------------------------------------------------------


async def test_five_percent_loss_is_repaired_by_retransmission(start_gateway, clients, loop_lag):
    gateway = await start_gateway(test_drop_first_tx_percent=5.0, test_drop_seed=1)
    client = await listener(gateway)
    clients.append(client)
    await client.say("A long tone.", voice="long")
    path = client.receive
    await path.wait_periods(25)  # playout has started
    start = path.stats
    await path.wait_periods(500)  # 10 s
    stats = path.stats
    lost = stats.lost - start.lost
    recovered = stats.recovered_nack - start.recovered_nack
    played = stats.played - start.played
    assert lost >= 10, stats
    assert recovered >= 0.95 * lost, stats
    assert stats.concealed - start.concealed < 0.01 * played, stats
    underrun = stats.underrun_periods - start.underrun_periods
    skipped = stats.skipped_periods - start.skipped_periods
    assert played + underrun == 500, stats
    assert underrun + skipped <= loop_lag.explained_periods(), (stats, loop_lag.stalls)
    counters = await nack_counters(client)
    assert counters["hits"] >= recovered


async def test_five_percent_loss_both_ways_is_mostly_inaudible(gateway, clients, loop_lag):
    """Loss on everything the client receives and sends: repairs and NACKs get lost too."""
    client = await listener(
        gateway,
        impairment=ImpairmentConfig(loss_pct=5.0, seed=11),
        outgoing_impairment=ImpairmentConfig(loss_pct=5.0, seed=12),
    )
    clients.append(client)
    await client.say("A long tone.", voice="long")
    path = client.receive
    await path.wait_periods(25)
    start = path.stats
    await path.wait_periods(500)
    stats = path.stats
    lost = stats.lost - start.lost
    assert lost >= 10, stats
    assert stats.recovered_nack - start.recovered_nack >= 0.7 * lost, stats
    assert stats.concealed - start.concealed < 0.01 * 500, stats  # FEC covers lost repairs
    assert stats.underrun_periods <= loop_lag.explained_periods(), stats


# -- jitter ----------------------------------------------------------------------------------


async def test_jitter_adapts_then_target_returns_when_calm(gateway, clients, loop_lag):
    client = await listener(gateway, receive_path=ReceivePathConfig(nack=False))
    clients.append(client)
    phased: list[Phased] = []

    def wrap(deliver):
        phased.append(Phased(deliver, ImpairmentConfig(jitter_ms=60.0, seed=5),
                             ImpairmentConfig()))
        return phased[0]

    aiortc_compat.impair_incoming(client.transceiver.receiver.transport, wrap)
    path = client.receive
    targets: list[int] = []

    async def watch(periods: int) -> None:
        for _ in range(periods):
            await path.wait_periods(1)
            targets.append(path.jitter.target_frames)

    try:
        await watch(150)  # adaptation
        adapted = path.stats
        assert adapted.target_frames >= 3, adapted
        stalls_before = loop_lag.explained_periods()
        await watch(250)
        jittery = path.stats
        new_underruns = jittery.underrun_periods - adapted.underrun_periods
        assert new_underruns <= loop_lag.explained_periods() - stalls_before, jittery
        peak = max(targets)
        phased[0].calm()
        stalls_before = len(loop_lag.stalls)
        await watch(400)
        calm = path.stats
    finally:
        phased[0].close()
    assert all(2 <= t <= 5 for t in targets)
    assert calm.target_frames < peak, (calm, peak)
    if len(loop_lag.stalls) == stalls_before:  # a stalled loop is jitter too
        assert calm.target_frames <= 3, (calm, peak)


# -- reordering and duplication ---------------------------------------------------------------


async def test_reordering_and_duplication_do_not_change_what_is_heard(gateway, clients):
    clean = await listener(gateway)
    messy = await listener(
        gateway,
        impairment=ImpairmentConfig(reorder_pct=15.0, reorder_gap_ms=30.0, duplicate_pct=15.0,
                                    seed=3),
    )
    clients += [clean, messy]
    await messy.receive.wait_periods(50)  # the jitter buffer has seen some reordering
    clean_state, messy_state = await asyncio.gather(speak(clean), speak(messy))
    clean_periods = speech_periods(clean, clean_state)
    messy_periods = speech_periods(messy, messy_state)
    expected = expected_tone_payloads()
    assert [p.payload for p in clean_periods] == expected
    assert [p.payload for p in messy_periods] == expected
    assert {p.kind for p in messy_periods} == {FrameKind.FRAME}
    assert np.array_equal(speech_pcm(clean, clean_periods), speech_pcm(messy, messy_periods))
    stats = messy.receive.stats
    assert stats.lost > 0, stats  # held-back packets: asked for again, or overtaken
    assert stats.concealed == 0 and stats.recovered_fec == 0, stats
    # (duplicates never reach RTP: SRTP's replay check drops the second copy)
    impaired = messy.impaired_in.stats
    assert impaired.reordered > 0 and impaired.duplicated > 0


# -- sequence wrap ---------------------------------------------------------------------------


async def test_loss_across_the_sequence_wrap_is_recovered(gateway, clients):
    client = GatewayClient(gateway.url, gateway.http, receive_path=RECORDED, capture=True)
    clients.append(client)
    with aiortc_compat.fixed_start_sequence(65535 - 40):
        await client.connect()
        await asyncio.wait_for(client.capture.wait_for_seq(65535 - 40), 5.0)
    assert client.capture.packets[0].seq & 0xFFFF >= 65535 - 40  # the wrap is ahead
    drops: list[DropSeqsOnce] = []

    def wrap(deliver):
        drops.append(DropSeqsOnce(deliver, {65535, 0}))
        return drops[0]

    aiortc_compat.impair_incoming(client.transceiver.receiver.transport, wrap)
    await asyncio.wait_for(client.receive.wait_played(2), 5.0)
    assert sorted(drops[0].dropped) == [0, 65535]
    by_seq = {p.seq: p for p in client.receive.played if p.seq is not None}
    assert by_seq[65535].kind is FrameKind.FRAME and by_seq[0].kind is FrameKind.FRAME
    stats = client.receive.stats
    assert stats.recovered_nack == 2 and stats.concealed == 0, stats
    counters = await nack_counters(client)
    assert counters["hits"] >= 2 and counters["misses"] == 0, counters


# -- NACK past the retransmission store --------------------------------------------------------


async def test_nack_older_than_five_seconds_gets_a_concealment_packet(gateway, clients):
    # NACK off on the client: the packet dropped here stays missing until we ask, too late.
    client = await listener(gateway, receive_path=ReceivePathConfig(nack=False))
    clients.append(client)
    await asyncio.wait_for(client.capture.wait_packets(1), 5.0)  # any packet
    first = client.capture.packets[0]
    old_seq = seq_add(first.seq & 0xFFFF, 10)
    drops: list[DropSeqsOnce] = []

    def wrap(deliver):
        drops.append(DropSeqsOnce(deliver, {old_seq}))
        return drops[0]

    # (a packet that did arrive cannot be asked for again: SRTP would reject the replay)
    aiortc_compat.impair_incoming(client.transceiver.receiver.transport, wrap)
    await asyncio.wait_for(client.capture.wait_for_seq(seq_add(old_seq, 300)), 10.0)
    assert drops[0].dropped == [old_seq]
    before_old = next(p for p in client.capture.packets if p.seq & 0xFFFF == seq_add(old_seq, -1))
    answered: asyncio.Future = asyncio.get_running_loop().create_future()

    def on_rtp(packet, arrival_ms) -> None:
        if packet.sequence_number == old_seq and not answered.done():
            answered.set_result(packet)

    client.add_rtp_listener(on_rtp)
    before = await nack_counters(client)
    ssrc = aiortc_compat.receiver_rtcp_ssrc(client.transceiver.receiver)
    assert await client.send_rtcp(build_nack_packet(ssrc, first.ssrc, [old_seq]))
    packet = await asyncio.wait_for(answered, 5.0)
    assert len(packet.payload) == 1  # a TOC byte alone: the decoder conceals
    assert packet.payload[0] & 0x03 == 0
    assert packet.timestamp == (before_old.timestamp + 960) % 2**32
    after = await nack_counters(client)
    assert after["misses"] == before["misses"] + 1
    assert after["hits"] == before["hits"]
    assert client.receive.stats.late >= 1  # far behind the playout point: not played


# -- fuzzed RTCP -------------------------------------------------------------------------------


def random_rtcp(rng: random.Random) -> bytes:
    size = rng.randrange(8, 96)
    data = bytearray(rng.randbytes(size))
    data[0] = 0x80 | (data[0] & 0x3F)  # version 2, so the gateway's DTLS transport takes it
    data[1] = rng.randrange(192, 209)  # RTCP packet types: sent (and unprotected) as SRTCP
    return bytes(data)


def mutated_nack(rng: random.Random, sender: int, media: int, around: int) -> bytes:
    seqs = [seq_add(around, -rng.randrange(0, 400)) for _ in range(rng.randrange(1, 40))]
    data = bytearray(build_nack_packet(sender, media, seqs))
    for _ in range(rng.randrange(1, 4)):
        how = rng.randrange(6)
        if how == 0:  # flip a bit anywhere but the packet type
            i = rng.choice([0, *range(2, len(data))])
            data[i] ^= 1 << rng.randrange(8)
        elif how == 1:  # wrong length field
            struct.pack_into("!H", data, 2, rng.randrange(0, 65536))
        elif how == 2 and len(data) > 9:  # truncate
            del data[rng.randrange(8, len(data)) :]
        elif how == 3:  # trailing garbage
            data += rng.randbytes(rng.randrange(1, 9))
        elif how == 4:  # padding bit with a bad count
            data[0] |= 0x20
            data[-1] = rng.randrange(256)
        else:  # another FMT
            data[0] = (data[0] & 0xE0) | rng.randrange(32)
        data[0] = 0x80 | (data[0] & 0x3F)
    return bytes(data)


async def test_fuzzed_rtcp_is_counted_and_the_stream_keeps_flowing(gateway, clients):
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        client = await listener(gateway)
        clients.append(client)
        await asyncio.wait_for(client.capture.wait_packets(1), 5.0)
        await client.receive.wait_periods(10)
        first = client.capture.packets[0]
        sender = aiortc_compat.receiver_rtcp_ssrc(client.transceiver.receiver)
        before = await nack_counters(client)
        rng = random.Random(2024)
        for i in range(400):
            newest = client.capture.packets[-1].seq & 0xFFFF
            if i % 2:
                data = mutated_nack(rng, sender, first.ssrc, newest)
            else:
                data = random_rtcp(rng)
            assert await client.send_rtcp(data)
            if i % 20 == 0:
                await client.receive.wait_periods(1)  # spread over the stream
        newest = client.capture.packets[-1].seq & 0xFFFF
        await asyncio.wait_for(client.capture.wait_for_seq(seq_add(newest, 25)), 5.0)
        state = await client.state()
        assert state["connection_state"] == "connected"
        after = state["nack"]
        assert after["malformed"] > before["malformed"], after
        # a valid NACK is still served
        target = seq_add(client.capture.packets[-1].seq & 0xFFFF, -5)
        assert await client.send_rtcp(build_nack_packet(sender, first.ssrc, [target]))
        await asyncio.wait_for(client.capture.wait_for_seq(seq_add(newest, 50)), 5.0)
        final = await nack_counters(client)
        assert final["nacks_received"] > after["nacks_received"]
        state = await speak(client)  # and speech still plays
        assert seq_diff(state["last_seq"], newest) > 0
    finally:
        loop.set_exception_handler(previous)
    assert errors == []
