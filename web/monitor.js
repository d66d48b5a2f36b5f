// A connected session's watchers: getStats every second (panel, plots, history), the first RTP
// packet dated to the ms, and the gateway's view of the session (GET, every second).

import { GatewayError } from "./http.js";
import { renderStats, showFirstPacket } from "./panel.js";
import { summarize } from "./stats.js";
import { demo } from "./state.js";
import { renderUtterances } from "./ui.js";
import { getSession } from "./whep.js";

const STATS_PERIOD_MS = 1000;
const HISTORY = 60; // samples (seconds) kept for the plots
const FIRST_PACKET_POLL_MS = 4;
const PACKET_MS = 20; // the gateway's packets are 20 ms apart

/** A summarize() snapshot of the session's stats; `record` keeps it as the latest. */
export async function pollStats(current, record = true) {
  const report = await current.pc.getStats();
  const snapshot = summarize(report, current.lastStats);
  if (!snapshot || !record) return snapshot;
  current.lastStats = snapshot;
  demo.stats = snapshot;
  demo.history.push(snapshot);
  if (demo.history.length > HISTORY) demo.history.shift();
  return snapshot;
}

/** Poll the receiver's stats every few ms until the first RTP packet shows, and date its arrival. */
export async function watchFirstPacket(current) {
  while (!current.ended) {
    const report = await current.receiver.getStats();
    const seenAt = performance.now();
    let inbound = null;
    report.forEach((e) => {
      if (e.type === "inbound-rtp") inbound = e;
    });
    if (inbound && inbound.packetsReceived > 0) {
      // Date the packet by Chromium's own arrival stamp, which shares its clock with the report's
      // timestamp (wall-clock ms, like performance.timeOrigin + performance.now()). Reports can
      // be cached for up to ≈50 ms (and take 15-20 ms to come on a busy machine), so a first
      // sighting may already count 2–3 packets: the stamp is the latest one's. The gateway
      // paces its packets 20 ms apart from the first, so the first came (n − 1) × 20 ms before
      // the n-th (never before the answer, without which nothing could arrive).
      const origin = performance.timeOrigin;
      const t = demo.timing;
      t.firstPacketSeenAt = seenAt;
      if (Math.abs(inbound.timestamp - origin - seenAt) < 1000) {
        t.firstPacketAt = inbound.lastPacketReceivedTimestamp - origin;
      } else {
        const age = inbound.timestamp - inbound.lastPacketReceivedTimestamp; // other clock base
        t.firstPacketAt = Number.isFinite(age) && age >= 0 && age < 1000 ? seenAt - age : seenAt;
      }
      if (!Number.isFinite(t.firstPacketAt) || t.firstPacketAt > seenAt) t.firstPacketAt = seenAt;
      t.latestPacketAt = t.firstPacketAt; // the n-th's stamp: an upper bound for the first
      t.firstPacketAt -= (inbound.packetsReceived - 1) * PACKET_MS;
      t.firstPacketAt = Math.max(t.firstPacketAt, t.answerAt ?? t.clickedAt, t.clickedAt);
      t.firstPacketMs = t.firstPacketAt - t.clickedAt;
      t.firstPacketCount = inbound.packetsReceived;
      showFirstPacket(t.firstPacketMs);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, FIRST_PACKET_POLL_MS));
  }
}

/** Every second: stats, then the gateway's state. `onGone` runs when the gateway answers 404. */
export function startMonitor(current, onGone) {
  current.timers.push(setInterval(() => tick(current, onGone), STATS_PERIOD_MS));
}

async function tick(current, onGone) {
  if (current.ended) return;
  let snapshot = null;
  try {
    snapshot = await pollStats(current);
  } catch (err) {
    console.warn("getStats failed:", err);
  }
  if (current.ended) return;
  if (snapshot) renderStats(snapshot);
  refreshServerState(current, onGone);
}

async function refreshServerState(current, onGone) {
  if (!current.url) return;
  try {
    demo.serverState = await getSession(current.url, current.abort.signal);
    renderUtterances(demo.serverState.utterances?.recent ?? []);
  } catch (err) {
    if (current.ended || err.name === "AbortError") return;
    if (err instanceof GatewayError && err.status === 404) await onGone();
  }
}
