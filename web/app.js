// Voice gateway demo page: one WHEP-style session with trickle ICE, speech controls and live stats.
//
// Flow: the offer is made ahead (page load) → Connect (a user click, so audio may start) →
// POST /v1/sessions at once (never waiting for ICE gathering to finish) → candidates gathered
// later follow as PATCH application/trickle-ice-sdpfrag →
// the remote track plays through an <audio> element (Chromium renders a remote WebRTC stream
// only when a media element plays it) and feeds two AnalyserNodes (level, dominant frequency).
//
// `window.gatewayDemo` exposes state and measurements for tests and curious users.

import { Plot } from "./plot.js";
import { summarize } from "./stats.js";

const API = new URL("../", import.meta.url); // this file is /web/app.js; the API is at the root
const CONNECT_TIMEOUT_MS = 30_000; // Chromium itself gives up on ICE after ≈15 s
const STATS_PERIOD_MS = 1000;
const HISTORY = 60; // samples (seconds) kept for the plots
const FIRST_PACKET_POLL_MS = 4;
const SILENT_RMS = 0.01; // −40 dBFS: speech has stopped
const AUDIBLE_RMS = 0.05; // −26 dBFS: speech has started
const SILENCE_HOLD_MS = 40; // silence must last this long to count as stopped
const WATCH_LIMIT_MS = 10_000;

const $ = (id) => document.getElementById(id);
const ui = {
  state: $("state"),
  connect: $("connect"),
  disconnect: $("disconnect"),
  error: $("error"),
  errorTitle: $("error-title"),
  errorMessage: $("error-message"),
  errorClose: $("error-close"),
  text: $("text"),
  voiceField: $("voice-field"),
  voice: $("voice"),
  voiceSingle: $("voice-single"),
  cutIn: $("cut-in"),
  speak: $("speak"),
  interrupt: $("interrupt"),
  latency: $("latency"),
  meter: $("meter-bar"),
  utterances: $("utterances"),
  audio: $("remote"),
  health: $("health"),
  stat: {
    rtt: $("s-rtt"),
    jitter: $("s-jitter"),
    received: $("s-received"),
    lost: $("s-lost"),
    nack: $("s-nack"),
    concealed: $("s-concealed"),
    jb: $("s-jb"),
    level: $("s-level"),
    freq: $("s-freq"),
    first: $("s-first"),
    codec: $("s-codec"),
    fmtp: $("s-fmtp"),
    answerFmtp: $("s-answer-fmtp"),
  },
};

const css = getComputedStyle(document.documentElement);
const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
const plots = {
  jb: new Plot($("plot-jb"), {
    series: [{ color: color("--accent", "#2457d6") }],
    floorMax: 50,
    format: (v) => `${v.toFixed(0)} ms`,
  }),
  loss: new Plot($("plot-loss"), {
    series: [{ color: color("--danger", "#c4332b") }, { color: color("--warn", "#b26b00") }],
    floorMax: 2,
    format: (v) => `${v.toFixed(1)} %`,
  }),
  level: new Plot($("plot-level"), {
    series: [{ color: color("--ok", "#1d8a4e") }],
    max: 1,
    format: (v) => v.toFixed(2),
  }),
};

// ---- state shared with tests ------------------------------------------------------------------

const demo = {
  state: "idle", // idle | connecting | connected | failed | closed
  sessionId: null,
  sessionUrl: null,
  offerSdp: null,
  answerSdp: null,
  answerFmtp: null, // the gateway's Opus fmtp, as Chromium parsed it
  error: null, // {title, message, code, status}
  stats: null, // latest summarize() snapshot
  history: [],
  serverState: null, // last GET /v1/sessions/{id}
  voices: null,
  timing: {
    clickedAt: null, // performance.now() of the Connect click
    offerPostedAt: null,
    answerAt: null,
    connectedAt: null,
    firstPacketAt: null, // arrival of the first RTP packet (from inbound-rtp stats)
    firstPacketSeenAt: null, // when getStats first showed it
    firstPacketMs: null, // firstPacketAt − clickedAt
    firstPacketCount: null, // packets already counted when first seen (1 = exact)
  },
  candidates: { sent: 0, skipped: 0, patches: 0, patchErrors: [] },
  lastSpeak: null, // {clickedAt, acceptedAt, audibleAt, ms, utterance}
  lastInterrupt: null, // {clickedAt, respondedAt, silentAt, ms, wasAudible, interrupted}
  level: () => audio.rms(),
  levelDb: () => 20 * Math.log10(Math.max(audio.rms(), 1e-9)),
  dominantFrequency: () => audio.dominantFrequency(),
  statsNow: async () => (session ? pollStats(session, false) : null),
  get pc() {
    return session?.pc ?? null; // the live RTCPeerConnection, for inspection
  },
  get prepared() {
    return warm ? { offer: warm.offered, gathered: warm.gathered } : null; // the offer made ahead
  },
};
window.gatewayDemo = demo;

// ---- HTTP --------------------------------------------------------------------------------------

class GatewayError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** fetch against the gateway; a non-2xx answer becomes a GatewayError carrying the server's words. */
async function api(path, init = {}) {
  let response;
  try {
    response = await fetch(new URL(path, API), init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new GatewayError(0, "unreachable", `cannot reach the gateway at ${API.origin} (${err.message})`);
  }
  if (response.ok) return response;
  let code = `http_${response.status}`;
  let message = response.statusText || "request failed";
  const body = await response.text().catch(() => "");
  try {
    const parsed = JSON.parse(body);
    if (parsed?.error) {
      code = parsed.error.code ?? code;
      message = parsed.error.message ?? message;
    }
  } catch {
    if (body.trim()) message = body.trim().slice(0, 300);
  }
  throw new GatewayError(response.status, code, message);
}

// ---- audio: <audio> playback + analysers -------------------------------------------------------

const audio = {
  ctx: null,
  freq: null, // large FFT for the dominant frequency
  levelNode: null, // short window for level / onset / silence
  source: null,
  stream: null,
  timeBuf: null,
  freqBuf: null,

  /**
   * Create (or resume) the AudioContext, and tap the remote stream if it is already there.
   * Autoplay: allowed once the user has clicked on the page (Connect). Called after the offer
   * and answer have been exchanged, because the first AudioContext of a browser can take
   * ≈90 ms to open the audio device, and that must not delay the connection.
   */
  prepare() {
    if (!this.ctx) {
      this.ctx = new AudioContext({ latencyHint: "interactive" });
      this.freq = new AnalyserNode(this.ctx, { fftSize: 32768, smoothingTimeConstant: 0 });
      this.levelNode = new AnalyserNode(this.ctx, { fftSize: 256, smoothingTimeConstant: 0 });
      // Analysers only listen; a muted sink keeps them pulled by the graph.
      const sink = new GainNode(this.ctx, { gain: 0 });
      this.freq.connect(sink);
      this.levelNode.connect(sink);
      sink.connect(this.ctx.destination);
      this.timeBuf = new Float32Array(this.levelNode.fftSize);
      this.freqBuf = new Float32Array(this.freq.frequencyBinCount);
    }
    if (this.ctx.state !== "running") this.ctx.resume().catch(() => {});
    this.tap();
  },

  /** Play the remote stream. The <audio> element is what makes Chromium render it at all. */
  attach(stream) {
    this.stream = stream;
    ui.audio.srcObject = stream;
    ui.audio.play().catch((err) => {
      // Autoplay refused (no user gesture reached this page): the next click anywhere starts it.
      showError("Audio blocked", `the browser would not start playback (${err.message}); click anywhere on the page to hear it`);
      document.addEventListener(
        "click",
        () => {
          ui.audio.play().then(clearError, () => {});
          this.ctx?.resume();
        },
        { once: true },
      );
    });
    this.tap();
  },

  tap() {
    if (!this.ctx || !this.stream || this.source?.mediaStream === this.stream) return;
    if (this.source) this.source.disconnect();
    this.source = this.ctx.createMediaStreamSource(this.stream);
    this.source.connect(this.freq);
    this.source.connect(this.levelNode);
  },

  detach() {
    if (this.source) this.source.disconnect();
    this.source = null;
    this.stream = null;
    ui.audio.pause();
    ui.audio.srcObject = null;
  },

  lastAudibleAt: -Infinity,

  rms() {
    if (!this.levelNode) return 0;
    this.levelNode.getFloatTimeDomainData(this.timeBuf);
    let sum = 0;
    for (const v of this.timeBuf) sum += v * v;
    const rms = Math.sqrt(sum / this.timeBuf.length);
    if (rms > SILENT_RMS) this.lastAudibleAt = performance.now();
    return rms;
  },

  /** Peak of the spectrum in Hz (parabolic interpolation on dB), or null when silent. */
  dominantFrequency() {
    if (!this.freq) return null;
    const bins = this.freqBuf;
    this.freq.getFloatFrequencyData(bins);
    const hzPerBin = this.ctx.sampleRate / this.freq.fftSize;
    let k = Math.max(1, Math.ceil(20 / hzPerBin));
    let best = k;
    for (; k < bins.length - 1; k++) if (bins[k] > bins[best]) best = k;
    if (!(bins[best] > -90)) return null;
    const [a, b, c] = [bins[best - 1], bins[best], bins[best + 1]];
    const denom = a - 2 * b + c;
    const offset = denom === 0 ? 0 : (0.5 * (a - c)) / denom;
    return (best + offset) * hzPerBin;
  },
};

/**
 * Check `test()` every few ms; resolve the performance.now() at which it became true and then
 * stayed true for `holdMs` (so a momentary render dropout is not taken for silence), or null when
 * `limitMs` runs out.
 */
function watch(test, { holdMs = 0, limitMs = WATCH_LIMIT_MS } = {}) {
  const started = performance.now();
  let since = null;
  return new Promise((resolve) => {
    const timer = setInterval(() => {
      const now = performance.now();
      if (test()) {
        since ??= now;
        if (now - since >= holdMs) {
          clearInterval(timer);
          resolve(since);
        }
      } else {
        since = null;
        if (now - started > limitMs) {
          clearInterval(timer);
          resolve(null);
        }
      }
    }, 2);
  });
}

// ---- session -----------------------------------------------------------------------------------

let session = null; // {pc, url, abort, pending, chain, timers, ...}

function setState(state, label) {
  demo.state = state;
  ui.state.dataset.state = state;
  ui.state.textContent =
    label ?? { idle: "Not connected", connecting: "Connecting…", connected: "Connected", failed: "Failed", closed: "Disconnected" }[state];
  const live = state === "connecting" || state === "connected";
  ui.connect.hidden = live;
  ui.disconnect.hidden = !live;
  ui.speak.disabled = state !== "connected";
  ui.interrupt.disabled = state !== "connected";
}

function showError(title, message, err = null) {
  demo.error = { title, message, code: err?.code ?? null, status: err?.status ?? null };
  ui.errorTitle.textContent = title;
  ui.errorMessage.textContent = message;
  ui.error.hidden = false;
}

function clearError() {
  demo.error = null;
  ui.error.hidden = true;
}

function describe(err) {
  if (err instanceof GatewayError) {
    return err.status ? `${err.message} (HTTP ${err.status} ${err.code})` : err.message;
  }
  return err?.message ?? String(err);
}

// A peer connection with its offer made ahead of the click (at page load and after each
// session), so Connect only has to POST it: that saves createOffer + setLocalDescription
// (15–30 ms) on the click → first packet path. Its candidates wait in `buffered` until a session
// takes it over. Nothing is sent anywhere before the click.
let warm = null;

function prepareWarm() {
  if (warm || session || !("RTCPeerConnection" in window)) return;
  const pc = new RTCPeerConnection({ iceServers: [], bundlePolicy: "max-bundle" });
  const w = { pc, buffered: [], transceiver: pc.addTransceiver("audio", { direction: "recvonly" }) };
  w.offered = false;
  w.gathered = false;
  pc.onicecandidate = (event) => {
    w.buffered.push(event.candidate);
    if (event.candidate === null) w.gathered = true;
  };
  w.ready = pc.createOffer().then((offer) => pc.setLocalDescription(offer));
  w.ready.then(() => (w.offered = true), () => {});
  warm = w;
}

function takeWarm() {
  const w = warm;
  warm = null;
  if (w && w.pc.signalingState === "have-local-offer") return w;
  if (w) w.pc.close();
  const pc = new RTCPeerConnection({ iceServers: [], bundlePolicy: "max-bundle" });
  const fresh = { pc, buffered: [], transceiver: pc.addTransceiver("audio", { direction: "recvonly" }) };
  pc.onicecandidate = (event) => fresh.buffered.push(event.candidate);
  fresh.ready = pc.createOffer().then((offer) => pc.setLocalDescription(offer));
  return fresh;
}

async function connect() {
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
    url: null,
    abort: new AbortController(),
    pending: [],
    chain: Promise.resolve(),
    ufrag: null,
    pwd: null,
    mid: null,
    timers: [],
    lastStats: null,
    ended: false,
  };
  session = current;
  demo.candidates = { sent: 0, skipped: 0, patches: 0, patchErrors: [] };

  current.receiver = transceiver.receiver;
  pc.ontrack = (event) => audio.attach(event.streams[0] ?? new MediaStream([event.track]));
  pc.onconnectionstatechange = () => onConnectionState(current);

  demo.history = [];
  Object.values(plots).forEach((plot) => plot.clear());
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
    const response = await api("v1/sessions", {
      method: "POST",
      headers: { "Content-Type": "application/sdp" },
      body: sdp,
      signal: current.abort.signal,
    });
    const answer = await response.text();
    const location = response.headers.get("Location");
    t.answerAt = performance.now();
    if (current.ended) return;
    current.url = new URL(location, API).href;
    demo.sessionUrl = current.url;
    demo.sessionId = location.split("/").pop();
    demo.answerSdp = answer;
    await pc.setRemoteDescription({ type: "answer", sdp: answer });
    flushCandidates(current);
    audio.prepare();
    showAnswerFmtp(pc);
    watchFirstPacket(current);
    current.timers.push(setInterval(() => tick(current), STATS_PERIOD_MS));
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

/**
 * Whether the gateway can use a candidate ("candidate:…" attribute text). It speaks UDP only
 * (aioice), and cannot resolve mDNS-hidden host names (…local) — it learns such an address from
 * our connectivity checks anyway, as a peer-reflexive candidate.
 */
function usable(text) {
  const [, , transport, , address] = text.split(" ");
  return transport?.toLowerCase() === "udp" && !address?.endsWith(".local");
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
  const lines = [];
  if (current.ufrag) lines.push(`a=ice-ufrag:${current.ufrag}`);
  if (current.pwd) lines.push(`a=ice-pwd:${current.pwd}`);
  if (current.mid !== null) lines.push(`a=mid:${current.mid}`);
  for (const c of batch) lines.push(c === null ? "a=end-of-candidates" : `a=${c.candidate}`);
  const body = lines.join("\r\n") + "\r\n";
  current.chain = current.chain.then(async () => {
    if (current.ended) return;
    try {
      await api(current.url, {
        method: "PATCH",
        headers: { "Content-Type": "application/trickle-ice-sdpfrag" },
        body,
      });
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

async function teardown(current, { remote }) {
  if (current.ended) return;
  current.ended = true;
  current.abort.abort();
  current.timers.forEach((id) => {
    clearInterval(id);
    clearTimeout(id);
  });
  if (session === current) session = null;
  // DELETE before closing: a closed peer makes the gateway end the session on its own.
  const deleted =
    remote && current.url
      ? fetch(current.url, { method: "DELETE", keepalive: true }).catch(() => {})
      : null;
  audio.detach();
  current.pc.close();
  setTimeout(prepareWarm, 0);
  await deleted;
}

async function disconnect() {
  if (!session) return;
  const done = teardown(session, { remote: true }); // ends the session at once, DELETE in flight
  setState("closed");
  await done;
}

// ---- stats ----------------------------------------------------------------------------------

async function pollStats(current, record = true) {
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
async function watchFirstPacket(current) {
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
      // be cached for up to ≈50 ms, so a first sighting may already count 2–3 packets: the time
      // is then the latest one's, an upper bound for the first.
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
      t.firstPacketAt = Math.max(t.firstPacketAt, t.clickedAt);
      t.firstPacketMs = t.firstPacketAt - t.clickedAt;
      t.firstPacketCount = inbound.packetsReceived;
      ui.stat.first.textContent = `${t.firstPacketMs.toFixed(0)} ms`;
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, FIRST_PACKET_POLL_MS));
  }
}

async function tick(current) {
  if (current.ended) return;
  let snapshot = null;
  try {
    snapshot = await pollStats(current);
  } catch (err) {
    console.warn("getStats failed:", err);
  }
  if (current.ended) return;
  if (snapshot) render(snapshot);
  refreshServerState(current);
}

const fmt = (v, digits = 0, unit = "") => (v === null || v === undefined || Number.isNaN(v) ? "–" : `${v.toFixed(digits)}${unit}`);

function render(s) {
  const st = ui.stat;
  st.rtt.textContent = fmt(s.rttMs, 1, " ms");
  st.jitter.textContent = fmt(s.jitterMs, 1, " ms");
  st.received.textContent = s.packetsReceived.toLocaleString();
  st.lost.textContent = s.packetsLost.toLocaleString();
  st.nack.textContent = s.nackCount === undefined ? "off" : s.nackCount.toLocaleString();
  st.concealed.textContent = fmt(s.concealedPct, 2, " %");
  st.jb.textContent = fmt(s.intervalJitterBufferMs ?? s.jitterBufferMs, 0, " ms");
  st.level.textContent = fmt(s.audioLevel, 3);
  const f = audio.dominantFrequency();
  st.freq.textContent = f && s.audioLevel > 0.01 ? `${f.toFixed(1)} Hz` : "–";
  if (s.codec) {
    st.codec.textContent = `${s.codec.mimeType} · ${s.codec.clockRate} Hz RTP clock · payload type ${s.codec.payloadType}`;
    st.fmtp.textContent = s.codec.sdpFmtpLine || "–";
  }

  plots.jb.push(s.intervalJitterBufferMs);
  plots.loss.push(s.intervalLossPct, s.intervalConcealedPct);
  plots.level.push(s.audioLevel);
}

/**
 * The gateway's Opus fmtp as Chromium parsed it: pc.remoteDescription is Chromium's own
 * re-serialisation of the answer. (Codec stats' sdpFmtpLine shows the *receive* fmtp, which
 * Chromium takes from its own offer.)
 */
function showAnswerFmtp(pc) {
  const sdp = pc.remoteDescription?.sdp ?? "";
  const pt = sdp.match(/^a=rtpmap:(\d+) opus\/48000/im)?.[1];
  const fmtp = pt ? sdp.match(new RegExp(`^a=fmtp:${pt} (.*)$`, "m"))?.[1]?.trim() : null;
  demo.answerFmtp = fmtp ?? null;
  ui.stat.answerFmtp.textContent = fmtp ?? "–";
}

async function refreshServerState(current) {
  if (!current.url) return;
  try {
    const response = await api(current.url, { signal: current.abort.signal });
    demo.serverState = await response.json();
    renderUtterances(demo.serverState.utterances?.recent ?? []);
  } catch (err) {
    if (current.ended || err.name === "AbortError") return;
    if (err instanceof GatewayError && err.status === 404) {
      await teardown(current, { remote: false });
      setState("closed");
      showError("Session ended", "the gateway closed this session");
    }
  }
}

function renderUtterances(recent) {
  const items = recent.slice(-5).reverse();
  ui.utterances.replaceChildren(
    ...items.map((u) => {
      const li = document.createElement("li");
      const what = document.createElement("span");
      what.textContent = `${u.voice ?? ""} · ${u.id}`;
      const state = document.createElement("span");
      state.className = "state";
      state.dataset.state = u.state;
      state.textContent = u.state;
      li.append(what, state);
      return li;
    }),
  );
}

// ---- speech ------------------------------------------------------------------------------------

async function speak() {
  const current = session;
  if (!current?.url) return;
  const text = ui.text.value.trim();
  if (!text) {
    showError("Nothing to say", "type some text first");
    return;
  }
  const clickedAt = performance.now();
  const body = { text, interrupt: ui.cutIn.checked };
  if (!ui.voiceField.hidden && ui.voice.value) body.voice = ui.voice.value;
  const record = { clickedAt, acceptedAt: null, audibleAt: null, ms: null, utterance: null };
  demo.lastSpeak = record;
  const audible = watch(() => audio.rms() > AUDIBLE_RMS);
  try {
    const response = await api(`${current.url}/speech`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    record.utterance = await response.json();
    record.acceptedAt = performance.now();
    clearError();
  } catch (err) {
    showError("Speech refused", describe(err), err);
    return;
  }
  const at = await audible;
  if (at !== null && demo.lastSpeak === record) {
    record.audibleAt = at;
    record.ms = at - clickedAt;
    ui.latency.textContent = `sound after ${record.ms.toFixed(0)} ms`;
  }
}

async function interrupt() {
  const current = session;
  if (!current?.url) return;
  const clickedAt = performance.now();
  const wasAudible = audio.rms() > SILENT_RMS || clickedAt - audio.lastAudibleAt < 100;
  const record = {
    clickedAt,
    respondedAt: null,
    silentAt: null,
    ms: null,
    wasAudible,
    interrupted: null,
    // how long Chromium held audio in its jitter buffer lately: part of any stop time heard
    jitterBufferMs: demo.stats?.intervalJitterBufferMs ?? demo.stats?.jitterBufferMs ?? null,
  };
  demo.lastInterrupt = record;
  const silent = wasAudible
    ? watch(() => audio.rms() < SILENT_RMS, { holdMs: SILENCE_HOLD_MS })
    : Promise.resolve(null);
  try {
    const response = await api(`${current.url}/speech`, { method: "DELETE" });
    record.interrupted = (await response.json()).interrupted;
    record.respondedAt = performance.now();
  } catch (err) {
    showError("Interrupt failed", describe(err), err);
  }
  const at = await silent;
  if (at !== null) {
    record.silentAt = at;
    record.ms = at - clickedAt;
    ui.latency.textContent = `silent ${record.ms.toFixed(0)} ms after Interrupt`;
  }
  record.done = true;
}

// ---- page setup --------------------------------------------------------------------------------

async function loadVoices() {
  try {
    const { default: preferred, voices } = await (await api("v1/voices")).json();
    demo.voices = { default: preferred, voices };
    if (voices.length > 1) {
      ui.voice.replaceChildren(
        ...voices.map((name) => new Option(name, name, name === preferred, name === preferred)),
      );
      ui.voiceField.hidden = false;
    } else if (voices.length === 1) {
      ui.voiceSingle.textContent = `Voice: ${voices[0]}`;
      ui.voiceSingle.hidden = false;
    }
  } catch (err) {
    showError("Could not list voices", describe(err), err);
  }
}

async function loadHealth() {
  try {
    const health = await (await api("healthz")).json();
    ui.health.textContent = `Gateway ${health.version} · ${health.status}`;
  } catch (err) {
    ui.health.textContent = `Gateway unreachable: ${describe(err)}`;
  }
}

// The level meter: ≈20 updates a second, as a compositor-only transform (no layout, no
// repaint of the page), and none while the value stands still.
let meterShown = -1;
let meterAt = 0;

function meterLoop(now) {
  requestAnimationFrame(meterLoop);
  if (now - meterAt < 50) return;
  meterAt = now;
  const db = 20 * Math.log10(Math.max(audio.rms(), 1e-6)); // −60…0 dBFS → 0…1
  const fill = Math.round(Math.max(0, Math.min(1, (db + 60) / 60)) * 100) / 100;
  if (fill === meterShown) return;
  meterShown = fill;
  ui.meter.style.transform = `scaleX(${fill})`;
}

ui.connect.addEventListener("click", connect);
ui.disconnect.addEventListener("click", disconnect);
ui.speak.addEventListener("click", speak);
ui.interrupt.addEventListener("click", interrupt);
ui.errorClose.addEventListener("click", clearError);
ui.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !ui.speak.disabled) speak();
});
window.addEventListener("pagehide", () => {
  if (session?.url) fetch(session.url, { method: "DELETE", keepalive: true }).catch(() => {});
  warm?.pc.close();
  warm = null;
});

setState("idle");
prepareWarm();
loadVoices();
loadHealth();
requestAnimationFrame(meterLoop);
demo.ready = true;
