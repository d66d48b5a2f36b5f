// Turns an RTCStatsReport into the flat snapshot the page shows (and tests read).

/**
 * @param {RTCStatsReport} report
 * @param {object|null} previous  the snapshot of the last call (for per-interval values)
 * @returns {object|null} null until Chromium has an inbound-rtp audio entry
 */
export function summarize(report, previous) {
  let inbound = null;
  let transport = null;
  const byId = new Map();
  report.forEach((entry) => {
    byId.set(entry.id, entry);
    if (entry.type === "inbound-rtp" && entry.kind === "audio") inbound = entry;
    if (entry.type === "transport") transport = entry;
  });
  if (!inbound) return null;

  // RTT: the selected ICE candidate pair's STUN round trip (a receive-only peer gets no RTCP RTT).
  let pair = transport?.selectedCandidatePairId ? byId.get(transport.selectedCandidatePairId) : null;
  if (!pair) {
    report.forEach((entry) => {
      if (entry.type === "candidate-pair" && entry.nominated && entry.state === "succeeded") pair = entry;
    });
  }
  const codec = inbound.codecId ? byId.get(inbound.codecId) : null;

  const received = inbound.packetsReceived ?? 0;
  const lost = Math.max(0, inbound.packetsLost ?? 0);
  const samples = inbound.totalSamplesReceived ?? 0;
  const concealed = inbound.concealedSamples ?? 0;
  const jbDelay = inbound.jitterBufferDelay ?? 0;
  const jbEmitted = inbound.jitterBufferEmittedCount ?? 0;

  const snapshot = {
    at: performance.now(),
    timestamp: inbound.timestamp,
    packetsReceived: received,
    packetsLost: lost,
    bytesReceived: inbound.bytesReceived ?? 0,
    jitterMs: inbound.jitter === undefined ? null : inbound.jitter * 1000,
    nackCount: inbound.nackCount, // present only when NACK was negotiated
    fecPacketsReceived: inbound.fecPacketsReceived,
    totalSamplesReceived: samples,
    concealedSamples: concealed,
    silentConcealedSamples: inbound.silentConcealedSamples ?? 0,
    concealmentEvents: inbound.concealmentEvents ?? 0,
    insertedSamplesForDeceleration: inbound.insertedSamplesForDeceleration ?? 0,
    removedSamplesForAcceleration: inbound.removedSamplesForAcceleration ?? 0,
    concealedPct: samples > 0 ? (100 * concealed) / samples : null,
    jitterBufferDelay: jbDelay,
    jitterBufferEmittedCount: jbEmitted,
    jitterBufferMs: jbEmitted > 0 ? (1000 * jbDelay) / jbEmitted : null, // average since start
    jitterBufferTargetMs:
      inbound.jitterBufferTargetDelay !== undefined && jbEmitted > 0
        ? (1000 * inbound.jitterBufferTargetDelay) / jbEmitted
        : null,
    audioLevel: inbound.audioLevel ?? null,
    lastPacketReceivedTimestamp: inbound.lastPacketReceivedTimestamp ?? null,
    rttMs: pair?.currentRoundTripTime === undefined ? null : pair.currentRoundTripTime * 1000,
    codec: codec
      ? {
          mimeType: codec.mimeType,
          clockRate: codec.clockRate,
          channels: codec.channels,
          payloadType: codec.payloadType,
          sdpFmtpLine: codec.sdpFmtpLine ?? "",
        }
      : null,
    // per-interval values (since `previous`)
    intervalJitterBufferMs: null,
    intervalLossPct: null,
    intervalConcealedPct: null,
  };

  if (previous) {
    const emitted = jbEmitted - previous.jitterBufferEmittedCount;
    if (emitted > 0) {
      snapshot.intervalJitterBufferMs = (1000 * (jbDelay - previous.jitterBufferDelay)) / emitted;
    }
    const got = received - previous.packetsReceived;
    const missed = lost - previous.packetsLost;
    if (got + missed > 0) snapshot.intervalLossPct = (100 * Math.max(0, missed)) / (got + missed);
    const newSamples = samples - previous.totalSamplesReceived;
    if (newSamples > 0) {
      snapshot.intervalConcealedPct = (100 * (concealed - previous.concealedSamples)) / newSamples;
    }
  }
  return snapshot;
}
