"""Process metrics: counted where events happen, never backwards when sessions close."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.client.peer import GatewayClient


async def scrape(gateway) -> dict[tuple[str, tuple], float]:
    async with gateway.http.get(f"{gateway.url}/metrics") as r:
        assert r.status == 200 and r.content_type == "text/plain"
        text = await r.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_totals_survive_the_session_that_counted_them(gateway):
    before = await scrape(gateway)
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    said = await client.say("tone", voice="tone")
    await client.wait_utterance(said.utterance["id"])
    live = await scrape(gateway)
    sent_live = value(live, "voice_gateway_rtp_packets_sent_total")
    assert sent_live - value(before, "voice_gateway_rtp_packets_sent_total") >= 50
    assert value(live, "voice_gateway_sessions", state="connected") == 1
    assert value(live, "voice_gateway_utterances_total", state="done") - value(
        before, "voice_gateway_utterances_total", state="done") == 1
    assert value(live, "voice_gateway_say_to_first_packet_seconds_count") > value(
        before, "voice_gateway_say_to_first_packet_seconds_count")
    await client.close(delete=True)
    after = await scrape(gateway)
    assert value(after, "voice_gateway_rtp_packets_sent_total") >= sent_live  # folded, not lost
    closed = "voice_gateway_sessions_closed_total"
    assert value(after, closed, reason="deleted by client") - value(
        before, closed, reason="deleted by client") == 1
    assert value(after, "voice_gateway_sessions_created_total") - value(
        before, "voice_gateway_sessions_created_total") == 1
    async with gateway.http.get(f"{gateway.url}/healthz") as r:
        health = await r.json()
    totals = health["metrics"]
    assert totals["rtp_packets_sent_total"] == value(after, "voice_gateway_rtp_packets_sent_total")


async def test_the_shared_udp_socket_and_consent_are_counted(gateway):
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    try:
        await client.capture.wait_packets(10)
        samples = await scrape(gateway)
        assert value(samples, "voice_gateway_udp_mux_sockets") == 1
        assert value(samples, "voice_gateway_udp_mux_endpoints") == 1
        assert value(samples, "voice_gateway_udp_mux_received_total") >= 1  # ICE, DTLS
        assert value(samples, "voice_gateway_udp_mux_routed_by_ufrag_total") >= 1
        assert value(samples, "voice_gateway_udp_mux_batched_total") >= 10  # the RTP
        assert value(samples, "voice_gateway_udp_mux_sendmmsg_calls_total") >= 1
        for name in ("unknown_ufrag", "unknown_source", "kernel_drops", "sendmmsg_partial",
                     "send_failed", "transaction_misses"):
            assert ("voice_gateway_udp_mux_" + name + "_total", ()) in samples
        for name in ("checks", "answered", "answered_late", "unanswered", "expired"):
            assert ("voice_gateway_ice_consent_" + name + "_total", ()) in samples
        async with gateway.http.get(f"{gateway.url}/healthz") as r:
            health = await r.json()
        assert health["udp_mux"]["kernel_drops"] == 0
        assert set(health["ice_consent"]) >= {"checks", "answered_late", "expired"}
    finally:
        await client.close()
