// One WHEP-style session with trickle ICE: Connect → POST the offer made ahead at once (never
// waiting for ICE gathering to finish) → candidates gathered later follow by PATCH → the remote
// track plays; connection-state handling, failure reporting and teardown.

import { audio } from "./audio.js";
import { startCaptions, stopCaptions } from "./captions.js";
import { GatewayError, describe } from "./http.js";
import { startMonitor, watchFirstPacket } from "./monitor.js";
import { clearPlots, showAnswerFmtp } from "./panel.js";
import { prepareWarm, takeWarm } from "./peer.js";
import { Playout } from "./playout.js";
import { demo } from "./state.js";
import { clearError, setState, showError } from "./ui.js";
import { deleteSession, patchCandidates, postOffer, sdpFrag, usable } from "./whep.js";

const CONNECT_TIMEOUT_MS = 30_000; // Chromium itself gives up on ICE after ≈15 s

let session = null; // {pc, receiver, playout, url, abort, pending, chain, timers, ended, …}

/** The live session, or null. */
export const currentSession = () => session;

export async function connect() {
  if (session) return;
  const t = demo.timing;
  Object.keys(t).forEach((k) => (t[k] = null));
  t.clickedAt = performance.now();
  clearError();
  setState("connecting");

  const prepared = takeWarm();
  const { pc, transceiver } = prepared;
  const current = {
    pc,
    receiver: transceiver.receiver,
    playout: new Playout(transceiver.receiver),
    url: null,
    abort: new AbortController(),
    pending: [], // candidates waiting for the session URL
    chain: Promise.resolve(), // PATCHes, in order
    ufrag: null,
    pwd: null,
    mid: null,
    timers: [],
    lastStats: null,
    speaking: new Set(), // Speak clicks whose sound has not been measured yet (speech.js)
    pipelineMs: null, // receiver playout → audible output, as the last onset measured it
    ended: false,
  };
  session = current;
  demo.candidates = { sent: 0, skipped: 0, patches: 0, patchErrors: [] };

  pc.ontrack = (event) => audio.attach(event.streams[0] ?? new MediaStream([event.track]));
  pc.onconnectionstatechange = () => onConnectionState(current);

  demo.history = [];
  clearPlots();
  try {
    await prepared.ready;
    // The offer carries the candidates gathered so far (less those the gateway cannot use, see
    // onCandidate); later ones and end-of-candidates follow by PATCH once the session exists.
    const local = pc.localDescription.sdp;
    const sdp = local
      .split("\r\n")
      .filter((line) => !line.startsWith("a=candidate:") || usable(line.slice(2)))
      .join("\r\n");
    for (const candidate of prepared.buffered) {
      if (candidate === null || !local.includes(candidate.candidate)) onCandidate(current, candidate);
    }
    pc.onicecandidate = (event) => onCandidate(current, event.candidate);
    demo.offerSdp = sdp;
    current.ufrag = sdp.match(/^a=ice-ufrag:(.+)$/m)?.[1]?.trim() ?? null;
    current.pwd = sdp.match(/^a=ice-pwd:(.+)$/m)?.[1]?.trim() ?? null;
    current.mid = transceiver.mid ?? sdp.match(/^a=mid:(.+)$/m)?.[1]?.trim() ?? null;

    t.offerPostedAt = performance.now();
    const { answer, url, id } = await postOffer(sdp, current.abort.signal);
    t.answerAt = performance.now();
    if (current.ended) return;
    current.url = url;
    demo.sessionUrl = url;
    demo.sessionId = id;
    startCaptions(url);
    demo.answerSdp = answer;
    await pc.setRemoteDescription({ type: "answer", sdp: answer });
    flushCandidates(current);
    audio.prepare();
    showAnswerFmtp(pc);
    watchFirstPacket(current);
    startMonitor(current, () => gone(current));
    current.timers.push(
      setTimeout(() => {
        if (!current.ended && demo.state === "connecting") {
          fail(current, "Connection timed out", `no media path after ${CONNECT_TIMEOUT_MS / 1000} s (ICE ${pc.iceConnectionState})`);
        }
      }, CONNECT_TIMEOUT_MS),
    );
  } catch (err) {
    if (current.ended) return;
    const status = err instanceof GatewayError ? err.status : 0;
    const title =
      status === 0 ? "Could not connect"
      : status < 500 || status === 503 ? "The gateway refused the offer"
      : "Gateway error";
    await teardown(current, { remote: false });
    setState("failed");
    showError(title, describe(err), err);
  }
}

function onCandidate(current, candidate) {
  if (current.ended) return;
  if (candidate === null) {
    current.pending.push(null); // end-of-candidates
  } else if (!candidate.candidate) {
    return; // Chromium's empty "end of this generation" marker
  } else if (!usable(candidate.candidate)) {
    demo.candidates.skipped++;
    return;
  } else {
    current.pending.push(candidate);
  }
  flushCandidates(current);
}

/** Send queued candidates in one PATCH, in order, once the session URL is known. */
function flushCandidates(current) {
  if (!current.url || current.pending.length === 0) return;
  const batch = current.pending.splice(0);
  const fragment = sdpFrag(current, batch);
  current.chain = current.chain.then(async () => {
    if (current.ended) return;
    try {
      await patchCandidates(current.url, fragment);
      demo.candidates.patches++;
      demo.candidates.sent += batch.filter((c) => c !== null).length;
    } catch (err) {
      // Not fatal: ICE usually succeeds through the candidates it already has.
      demo.candidates.patchErrors.push(describe(err));
      console.warn("trickle PATCH refused:", describe(err));
    }
  });
}

function onConnectionState(current) {
  if (current.ended) return;
  const { pc } = current;
  switch (pc.connectionState) {
    case "connected":
      demo.timing.connectedAt ??= performance.now();
      setState("connected");
      break;
    case "disconnected":
      setState("connecting", "Reconnecting…");
      break;
    case "failed": {
      // connectionState fails when either transport does; the legacy iceConnectionState may
      // still read "disconnected" then, so ask the transports themselves.
      const dtls = current.receiver.transport;
      if (dtls?.state === "failed" && dtls.iceTransport?.state !== "failed") {
        fail(current, "Connection failed", "the secure media transport (DTLS) could not be set up with the gateway");
      } else {
        fail(current, "ICE failed",
          "no network path to the gateway worked. It must offer an address this browser can reach " +
          "(its --ice-hosts setting) and UDP must not be blocked; a TURN server may be needed.");
      }
      break;
    }
    default:
      break;
  }
}

async function fail(current, title, message) {
  await teardown(current, { remote: true });
  setState("failed");
  showError(title, message);
}

/** The gateway no longer knows the session (it answered 404). */
async function gone(current) {
  await teardown(current, { remote: false });
  setState("closed");
  showError("Session ended", "the gateway closed this session");
}

async function teardown(current, { remote }) {
  if (current.ended) return;
  current.ended = true;
  current.abort.abort();
  current.timers.forEach((id) => {
    clearInterval(id);
    clearTimeout(id);
  });
  current.playout.stop();
  if (session === current) session = null;
  stopCaptions();
  // DELETE before closing: a closed peer makes the gateway end the session on its own.
  const deleted = remote && current.url ? deleteSession(current.url) : null;
  audio.detach();
  current.pc.close();
  setTimeout(() => session || prepareWarm(), 0);
  await deleted;
}

export async function disconnect() {
  if (!session) return;
  const done = teardown(session, { remote: true }); // ends the session at once, DELETE in flight
  setState("closed");
  await done;
}

/** The page is going away: end the session at the gateway too (keepalive DELETE). */
export function abandon() {
  if (session?.url) deleteSession(session.url);
}
