// Voice gateway demo page, the entry module: wires the controls, lists the voices, checks the
// gateway's health, prepares the first offer, and exposes `window.gatewayDemo` (state and
// measurements, for tests and curious users).
//
//   http.js     the API root, fetch → GatewayError       whep.js     session + speech resources
//   peer.js     the offer made ahead of the click         session.js  connect, trickle, teardown
//   monitor.js  stats / first packet / server state       playout.js  when an RTP timestamp plays
//   audio.js    <audio> playback, analysers, watch()      speech.js   Speak, Interrupt, their timing
//   ui.js       elements, state pill, errors, lists       panel.js    stats panel and plots
//   meter.js    the level meter                           state.js    the shared state object
//   stats.js    getStats → snapshot                       plot.js     the canvas plot
//   analysis.js AnalyserNode level and spectrum peak
// The HTTP modes (the "HTTP stream" card, no WebRTC):
//   frames.js      the framed Opus stream's parser
//   http-stream.js one play: fetch → jitter buffer → AudioDecoder → the worklet's PCM ring
//   http-audio.js  their AudioContext, the playout worklet, analysers (made at load)
//   http-playout-worklet.js  the AudioWorkletProcessor (loaded by audioWorklet.addModule)
//   http-ui.js     the card, gatewayDemo.http, the comparison with WebRTC
//   ogg.js         a plain <audio> on the Ogg/Opus URL, gatewayDemo.ogg

import { audio } from "./audio.js";
import { api, describe } from "./http.js";
import { playHttp, startHttpMode, stopHttp } from "./http-ui.js";
import { startMeter } from "./meter.js";
import { pollStats } from "./monitor.js";
import { playOgg, stopOgg } from "./ogg.js";
import { closeWarm, prepareWarm, warmInfo } from "./peer.js";
import { abandon, connect, currentSession, disconnect } from "./session.js";
import { interrupt, speak } from "./speech.js";
import { demo } from "./state.js";
import { $, clearError, setState, showError, showVoices, ui } from "./ui.js";

Object.defineProperties(demo, {
  level: { value: () => audio.rms() },
  levelDb: { value: () => 20 * Math.log10(Math.max(audio.rms(), 1e-9)) },
  dominantFrequency: { value: () => audio.dominantFrequency() },
  statsNow: { value: async () => (currentSession() ? pollStats(currentSession(), false) : null) },
  pc: { get: () => currentSession()?.pc ?? null, enumerable: true }, // the live RTCPeerConnection
  prepared: { get: () => warmInfo(), enumerable: true }, // the offer made ahead
});
window.gatewayDemo = demo;

async function loadVoices() {
  try {
    const { default: preferred, voices } = await (await api("v1/voices")).json();
    demo.voices = { default: preferred, voices };
    showVoices(preferred, voices);
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

ui.connect.addEventListener("click", connect);
ui.disconnect.addEventListener("click", disconnect);
ui.speak.addEventListener("click", speak);
ui.interrupt.addEventListener("click", interrupt);
ui.errorClose.addEventListener("click", clearError);
// one HTTP player at a time: each stops the other
$("http-play").addEventListener("click", () => {
  stopOgg();
  playHttp();
});
$("ogg-play").addEventListener("click", () => {
  stopHttp();
  playOgg();
});
ui.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !ui.speak.disabled) speak();
});
window.addEventListener("pagehide", () => {
  abandon();
  closeWarm();
});

setState("idle");
prepareWarm();
loadVoices();
loadHealth();
startMeter();
startHttpMode();
demo.ready = true;
