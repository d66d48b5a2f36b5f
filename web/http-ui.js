// The HTTP stream card: Play / Stop, the live readouts (first audio, jitter buffer, PCM ring,
// underruns, …), the level meter, and the comparison of the last figure of each mode: HTTP
// stream, WebRTC ("sound after", speech.js) and the <audio> element (ogg.js).
//
// window.gatewayDemo.http holds the latest play (see fresh() below); `level` and
// `dominantFrequency` are live readings of the worklet's output.

import { GatewayError, describe } from "./http.js";
import { RING_FRAMES, graph } from "./http-audio.js";
import { HttpStream, JITTER_FRAMES, MalformedStream, decoderConfigFor, httpStreamSupported } from "./http-stream.js";
import { ogg } from "./ogg.js";
import { demo } from "./state.js";
import { $, clearError, showError, ui } from "./ui.js";

const REFRESH_MS = 100;
const METER_MS = 50;

const el = {
  pace: $("http-pace"),
  start: $("http-start"),
  play: $("http-play"),
  stop: $("http-stop"),
  latency: $("http-latency"),
  meter: $("http-meter-bar"),
  first: $("h-first"),
  jb: $("h-jb"),
  ring: $("h-ring"),
  underruns: $("h-underruns"),
  decoded: $("h-decoded"),
  level: $("h-level"),
  freq: $("h-freq"),
  response: $("h-response"),
  firstFrame: $("h-first-frame"),
  cmpHttp: $("cmp-http"),
  cmpHttpWhat: $("cmp-http-what"),
  cmpWebrtc: $("cmp-webrtc"),
  cmpWebrtcWhat: $("cmp-webrtc-what"),
  cmpOgg: $("cmp-ogg"),
  cmpOggWhat: $("cmp-ogg-what"),
  cmpNote: $("cmp-note"),
};

const fresh = () => ({
  text: null,
  voice: null, // null: the gateway's default voice
  pace: null,
  startFrames: null,
  state: "idle", // idle | requesting | buffering | playing | draining | done | stopped | failed
  clickedAt: null, // performance.now() of the Play click
  responseAt: null, // the response headers (fetch resolved)
  responseMs: null,
  firstChunkAt: null, // the first body bytes
  firstFrameAt: null, // the first frame record parsed
  firstFrameMs: null,
  startedAt: null, // the jitter buffer reached its start level
  startedMs: null,
  playingAt: null, // the worklet rendered the play's first sample
  firstAudioAt: null, // the worklet rendered the first audible sample (|x| ≥ 0.05)
  firstAudioMs: null, // firstAudioAt − clickedAt: the figure
  onsetAt: null, // the same seen by an AnalyserNode on the worklet output (as WebRTC's onset)
  onsetMs: null,
  decodeMs: null, // the first frame's decode() → output
  resumedMs: null, // the click → the AudioContext runs (0-ish once it ran before)
  endAt: null, // the end (or error) record arrived
  drainedAt: null, // the worklet played the last sample
  header: null, // the stream header {sampleRate, frameMs, channels}
  decoder: null, // {codec, sampleRate, channels, description, outputRate}
  bytes: 0,
  framesReceived: 0,
  framesDecoded: 0,
  framesPlayed: 0,
  jitterFrames: 0, // frames in the jitter buffer now
  jitterMax: 0,
  jitterMin: null, // lowest while playing
  jitterCapacity: JITTER_FRAMES,
  ringFrames: 0, // decoded frames in the worklet's ring now (fractional: one may be half played)
  ringMin: null, // lowest after a frame was used up, while playing
  ringCapacity: RING_FRAMES,
  underruns: 0, // times the ring ran dry before the end
  underrunMs: 0,
  underrunAt: [],
  peakLevel: 0, // highest level() seen during the play (sampled every 50 ms)
  streamError: null, // an error record {code, message}
  error: null, // why the play failed {title, message, code, status}
});

export const http = Object.assign(Object.create(null), fresh(), { plays: 0, supported: null, workletReady: false });
Object.defineProperties(http, {
  level: { get: () => graph.streamRms(), enumerable: true },
  dominantFrequency: { get: () => graph.stream?.dominantFrequency() ?? null, enumerable: true },
});
demo.http = http;

let current = null; // the HttpStream playing

export async function playHttp() {
  const clickedAt = performance.now();
  const text = ui.text.value.trim();
  if (!text) {
    showError("Nothing to say", "type some text first");
    return;
  }
  current?.stop();
  const voice = !ui.voiceField.hidden && ui.voice.value ? ui.voice.value : null;
  const pace = el.pace.value;
  const startFrames = Number(el.start.value);
  Object.assign(http, fresh(), { text, voice, pace, startFrames, clickedAt });
  http.plays++;
  el.latency.textContent = "waiting for sound…";
  if (!graph.node) {
    try {
      await graph.prepare(); // made when the page loaded: normally long done
    } catch (err) {
      fail(err);
      return;
    }
  }
  const problem = httpStreamSupported();
  if (problem) {
    fail(new Error(problem));
    return;
  }
  const request = { text, pace };
  if (voice) request.voice = voice;
  const stream = new HttpStream(request, http, { startFrames, clickedAt });
  current = stream;
  controls();
  const running = stream.run(); // the request is on its way before the next line runs
  // Only then start the context: a cold audio device keeps the main thread ≈40 ms in
  // resume(), time the request now spends on the network. (Pressing the button already
  // resumed it, see startHttpMode.)
  graph.resume().then(
    () => (http.resumedMs ??= performance.now() - clickedAt),
    (err) => stream.fail(err),
  );
  refresh();
  let state;
  try {
    state = await running;
  } catch (err) {
    if (current === stream) fail(err);
    return;
  } finally {
    if (current === stream) current = null;
    controls();
  }
  if (state === "stopped") {
    // by Stop (another Play, which replaced this one, has its own readout)
    if (current === null && http.firstAudioMs === null) el.latency.textContent = "stopped";
    return;
  }
  if (http.streamError) {
    const { code, message } = http.streamError;
    http.error = { title: "The stream ended on an error", message, code, status: null };
    showError("The stream ended on an error", `${message} (${code})`, { code });
  } else {
    clearError();
  }
  if (http.firstAudioMs === null) el.latency.textContent = `no sound (${http.state})`;
  refresh();
}

export function stopHttp() {
  current?.stop();
}

function fail(err) {
  const title =
    err instanceof GatewayError && err.status ? "The gateway refused the stream"
    : err instanceof GatewayError ? "Could not reach the gateway"
    : err instanceof MalformedStream ? "The stream is malformed"
    : "HTTP stream failed";
  http.state = "failed";
  http.error = { title, message: describe(err), code: err.code ?? null, status: err.status ?? null };
  el.latency.textContent = "";
  showError(title, describe(err), err);
  refresh();
}

function controls() {
  el.stop.disabled = current === null;
}

const fmt = (v, digits = 0, unit = "") =>
  v === null || v === undefined || Number.isNaN(v) ? "–" : `${v.toFixed(digits)}${unit}`;

const what = (r) => (r?.text ? `“${r.text.length > 40 ? `${r.text.slice(0, 39)}…` : r.text}” · ${r.voice ?? "default voice"}` : "");

function refresh() {
  const h = http;
  const live = current !== null;
  el.first.textContent = fmt(h.firstAudioMs, 0, " ms");
  el.jb.textContent = h.clickedAt === null ? "–" : `${h.jitterFrames} / ${JITTER_FRAMES}`;
  el.ring.textContent = h.clickedAt === null ? "–" : `${h.ringFrames.toFixed(1)} / ${RING_FRAMES}`;
  el.underruns.textContent = h.clickedAt === null ? "–" : String(h.underruns);
  el.decoded.textContent = h.clickedAt === null ? "–" : h.framesDecoded.toLocaleString();
  const level = h.level;
  el.level.textContent = h.clickedAt === null ? "–" : level.toFixed(3);
  const f = level > 0.01 ? h.dominantFrequency : null;
  el.freq.textContent = f ? `${f.toFixed(1)} Hz` : "–";
  el.response.textContent = fmt(h.responseMs, 0, " ms");
  el.firstFrame.textContent = fmt(h.firstFrameMs, 0, " ms");
  if (h.firstAudioMs !== null) el.latency.textContent = `first audio after ${h.firstAudioMs.toFixed(0)} ms`;
  else if (live && h.state !== "requesting") el.latency.textContent = `${h.state}…`;

  // the last figure of each mode, and whether they are for the same words
  const rtc = demo.lastSpeak;
  el.cmpHttp.textContent = fmt(h.firstAudioMs, 0, " ms");
  el.cmpHttpWhat.textContent = what(h) + (h.pace ? ` · ${h.pace}, start at ${h.startFrames}` : "");
  el.cmpWebrtc.textContent = rtc?.ms != null ? `${rtc.ms.toFixed(0)} ms` : "–";
  el.cmpWebrtcWhat.textContent = what(rtc) + (rtc?.method ? ` · ${rtc.method}` : "");
  el.cmpOgg.textContent = fmt(ogg.firstAudioMs, 0, " ms");
  el.cmpOggWhat.textContent = what(ogg);
  const same = h.text && rtc?.text && h.text === rtc.text && h.voice === rtc.voice;
  el.cmpNote.textContent =
    h.firstAudioMs !== null && rtc?.ms != null
      ? same ? "HTTP and WebRTC: the same text and voice." : "HTTP and WebRTC: different text or voice."
      : "Speak (WebRTC) and Play over HTTP the same text to compare.";
}

let refreshedAt = 0;
let meteredAt = 0;
let shown = -1;

function frame(now) {
  requestAnimationFrame(frame);
  if (now - meteredAt >= METER_MS) {
    meteredAt = now;
    const rms = Math.max(graph.streamRms(), graph.oggRms());
    if (current) http.peakLevel = Math.max(http.peakLevel, graph.streamRms());
    if (ogg.state === "playing") ogg.peakLevel = Math.max(ogg.peakLevel, graph.oggRms());
    const db = 20 * Math.log10(Math.max(rms, 1e-6)); // −60…0 dBFS → 0…1
    const fill = Math.round(Math.max(0, Math.min(1, (db + 60) / 60)) * 100) / 100;
    if (fill !== shown) {
      shown = fill;
      el.meter.style.transform = `scaleX(${fill})`;
    }
  }
  if (now - refreshedAt >= REFRESH_MS) {
    refreshedAt = now;
    refresh();
  }
}

/** Build the audio graph ahead (the context waits for a click), and find the decoder config. */
export function startHttpMode() {
  el.stop.addEventListener("click", stopHttp);
  // A press is a user activation: start the context then, a little before the click.
  for (const button of [el.play, $("ogg-play")]) {
    button.addEventListener("pointerdown", () => graph.resume().catch(() => {}));
  }
  graph.prepare().then(
    () => {
      http.workletReady = true;
      const problem = httpStreamSupported();
      http.supported = problem === null;
      if (problem) el.play.title = problem;
      else decoderConfigFor({ sampleRate: 24_000, channels: 1 }).catch(() => {}); // the usual header
    },
    (err) => {
      http.supported = false;
      el.play.title = err.message;
    },
  );
  refresh();
  requestAnimationFrame(frame);
}
