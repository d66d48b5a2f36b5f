// Voice gateway demo page, the entry module: wires the controls, lists the voices, checks the
// gateway's health, prepares the first offer, and exposes `window.gatewayDemo` (state and
// measurements, for tests and curious users).
//
//   http.js     the API root, fetch → GatewayError       whep.js     session + speech resources
//   peer.js     the offer made ahead of the click         session.js  connect, trickle, teardown
//   monitor.js  stats / first packet / server state       playout.js  when an RTP timestamp plays
//   audio.js    <audio> playback, analysers, watch()      speech.js   Speak, Interrupt, their timing
//   captions.js the Speak card's live captions (word events, as heard)
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
// The "Talk" card (full duplex, the gateway started with --duplex):
//   talk.js        the microphone up a sendrecv offer + `events` data channel, SSE, teardown
//   talk-state.js  gatewayDemo.talk: events (each applied once of its two paths), turns
//   talk-audio.js  its AudioContext: microphone and reply analysers, the reply's <audio>
//   talk-ui.js     the card: VAD meter, transcripts, replies, event counts
//   timeline.js    each turn's latency drawn as a timeline
//   trickle.js     trickle ICE (PATCH) for the sessions it makes
// The "Realtime" card (the OpenAI Realtime protocol over WebRTC):
//   realtime.js    ephemeral key, the calls offer, the oai-events channel, gatewayDemo.realtime

import { audio } from "./audio.js";
import { api, describe } from "./http.js";
import { playHttp, startHttpMode, stopHttp } from "./http-ui.js";
import { startMeter } from "./meter.js";
import { pollStats } from "./monitor.js";
import { playOgg, stopOgg } from "./ogg.js";
import { closeWarm, prepareWarm, warmInfo } from "./peer.js";
import { abandon, connect, currentSession, disconnect } from "./session.js";
import { realtime, onRealtimeChange, sayToRealtime, startRealtime, stopRealtime } from "./realtime.js";
import { interrupt, speak } from "./speech.js";
import { demo } from "./state.js";
import { abandonTalk, onTalkError, startTalk, stopTalk } from "./talk.js";
import { talkAudio } from "./talk-audio.js";
import { talk } from "./talk-state.js";
import { startTalkUi, talkUi } from "./talk-ui.js";
import { $, clearError, setState, showError, showVoices, ui } from "./ui.js";

Object.defineProperties(demo, {
  level: { value: () => audio.rms() },
  levelDb: { value: () => 20 * Math.log10(Math.max(audio.rms(), 1e-9)) },
  dominantFrequency: { value: () => audio.dominantFrequency() },
  statsNow: { value: async () => (currentSession() ? pollStats(currentSession(), false) : null) },
  pc: { get: () => currentSession()?.pc ?? null, enumerable: true }, // the live RTCPeerConnection
  prepared: { get: () => warmInfo(), enumerable: true }, // the offer made ahead
});
Object.defineProperties(talk, {
  micLevel: { value: () => talkAudio.micLevel() }, // the microphone's RMS (0…1)
  replyLevel: { value: () => talkAudio.replyLevel() }, // the reply's RMS as played here
  peakReplyLevel: { get: () => talkAudio.peakReply, enumerable: true },
  peakMicLevel: { get: () => talkAudio.peakMic, enumerable: true },
});
demo.talk = talk;
demo.realtime = realtime;
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
talkUi.start.addEventListener("click", () => {
  clearError();
  startTalk(talkUi.audio);
});
talkUi.stop.addEventListener("click", stopTalk);
onTalkError((title, message, err) => showError(title, message, err));
onRealtimeChange((rt) => {
  const pill = $("rt-state");
  pill.dataset.state = rt.state;
  pill.textContent = { idle: "Not connected", connecting: "Connecting…", connected: rt.playing
    ? "Speaking" : "Listening", failed: "Failed" }[rt.state];
  $("rt-start").disabled = rt.state === "connecting" || rt.state === "connected";
  $("rt-stop").disabled = rt.state !== "connected";
  $("rt-text").disabled = rt.state !== "connected";
  $("rt-log").replaceChildren(...rt.log.map(({ role, text }) => {
    const li = document.createElement("li");
    li.dataset.role = role;
    li.textContent = `${role === "user" ? "You" : "Bot"}: ${text}`;
    return li;
  }));
  $("rt-events").textContent = Object.entries(rt.events).map(([k, n]) => `${k} ×${n}`).join(" · ");
  if (rt.state === "failed" && rt.error) showError("Realtime failed", rt.error);
});
$("rt-start").addEventListener("click", () => {
  clearError();
  startRealtime($("rt-remote"));
});
$("rt-stop").addEventListener("click", stopRealtime);
$("rt-text").addEventListener("keydown", (event) => {
  const input = event.target;
  if (event.key === "Enter" && input.value.trim()) {
    sayToRealtime(input.value.trim());
    input.value = "";
  }
});
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
  abandonTalk();
  stopRealtime();
  closeWarm();
});

setState("idle");
prepareWarm();
loadVoices();
loadHealth();
startMeter();
startHttpMode();
startTalkUi();
demo.ready = true;
