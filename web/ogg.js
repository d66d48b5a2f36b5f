// The plain <audio> player on the Ogg/Opus URL (GET /v1/audio/speech?input=…&voice=…&
// response_format=opus, streamed as the gateway makes it): the browser's own demuxer, decoder
// and buffering. Routed through the HTTP graph (http-audio.js) to hear what it plays; state in
// window.gatewayDemo.ogg. A media element does not say why a source failed, so on an error the
// page asks the gateway itself for its answer and shows the server's message.

import { AUDIBLE_RMS, watch } from "./audio.js";
import { API, api, describe } from "./http.js";
import { graph } from "./http-audio.js";
import { demo } from "./state.js";
import { $, clearError, showError, ui } from "./ui.js";

const SOUND_LIMIT_MS = 120_000;

const el = {
  play: $("ogg-play"),
  audio: $("ogg-audio"),
  status: $("ogg-status"),
  url: $("ogg-url"),
};

const fresh = () => ({
  url: null,
  text: null,
  voice: null,
  clickedAt: null,
  playingAt: null, // the element's "playing" event
  firstAudioAt: null, // the level onset through the graph (as for the WebRTC stream)
  firstAudioMs: null,
  state: "idle", // idle | loading | playing | done | paused | failed
  error: null,
  peakLevel: 0,
});

export const ogg = Object.assign(Object.create(null), fresh());
Object.defineProperties(ogg, {
  level: { get: () => graph.oggRms(), enumerable: true },
  dominantFrequency: { get: () => graph.ogg?.dominantFrequency() ?? null, enumerable: true },
  currentTime: { get: () => el.audio.currentTime, enumerable: true },
  readyState: { get: () => el.audio.readyState, enumerable: true },
  paused: { get: () => el.audio.paused, enumerable: true },
});
demo.ogg = ogg;

let play = 0; // which click the element's events belong to
let watching = null; // AbortController of the onset watch

/** The Ogg URL for the text and voice on the page. */
export function oggUrl(text, voice) {
  const url = new URL("v1/audio/speech", API);
  url.searchParams.set("input", text);
  if (voice) url.searchParams.set("voice", voice);
  url.searchParams.set("response_format", "opus");
  return url;
}

export async function playOgg() {
  const clickedAt = performance.now();
  const text = ui.text.value.trim();
  if (!text) {
    showError("Nothing to say", "type some text first");
    return;
  }
  const voice = !ui.voiceField.hidden && ui.voice.value ? ui.voice.value : null;
  const url = oggUrl(text, voice);
  const mine = ++play;
  watching?.abort();
  watching = new AbortController();
  Object.assign(ogg, fresh(), { url: url.href, text, voice, clickedAt, state: "loading" });
  el.url.textContent = `${url.pathname}${url.search}`;
  el.status.textContent = "loading…";
  try {
    if (!graph.ctx) await graph.prepare(); // made when the page loaded: normally long done
    graph.tapElement(el.audio);
  } catch (err) {
    ogg.state = "failed";
    showError("Audio unavailable", describe(err), err);
    return;
  }
  const onset = watch(() => ogg.playingAt !== null && graph.oggRms() > AUDIBLE_RMS, {
    limitMs: SOUND_LIMIT_MS,
    signal: watching.signal,
  });
  el.audio.src = url.href;
  const playing = el.audio.play(); // the request goes out first, then the context starts
  graph.resume().catch((err) => showError("Audio unavailable", describe(err), err));
  try {
    await playing;
  } catch (err) {
    if (mine === play && err.name !== "AbortError") await explain(mine, url, err);
    return;
  }
  if (mine !== play) return;
  clearError();
  const at = await onset;
  if (mine !== play || at === null) return;
  ogg.firstAudioAt = at;
  ogg.firstAudioMs = at - clickedAt;
  el.status.textContent = `sound after ${ogg.firstAudioMs.toFixed(0)} ms`;
}

/** The element failed: ask the gateway what it answers at that URL, and show its words. */
async function explain(mine, url, err) {
  ogg.state = "failed";
  el.status.textContent = "failed";
  const abort = new AbortController();
  try {
    const response = await api(url, { signal: abort.signal });
    abort.abort(); // it would stream: the element's trouble was elsewhere
    const detail = el.audio.error?.message || err.message;
    ogg.error = { code: `media_error_${el.audio.error?.code ?? 0}`, message: detail, status: response.status };
    showError("The <audio> element could not play the Ogg stream", detail);
  } catch (failure) {
    if (mine !== play) return;
    ogg.error = { code: failure.code ?? null, message: failure.message, status: failure.status ?? null };
    showError("The gateway refused the Ogg stream", describe(failure), failure);
  }
}

export function stopOgg() {
  if (!el.audio.paused) el.audio.pause();
}

export function oggBusy() {
  return ogg.state === "loading" || ogg.state === "playing";
}

el.audio.addEventListener("playing", () => {
  ogg.playingAt ??= performance.now();
  ogg.state = "playing";
  if (!ogg.firstAudioMs) el.status.textContent = "playing…";
});
el.audio.addEventListener("pause", () => {
  if (ogg.state === "playing") ogg.state = "paused";
});
el.audio.addEventListener("ended", () => {
  ogg.state = "done";
  watching?.abort();
});
el.audio.addEventListener("play", () => {
  graph.resume().catch(() => {}); // the native controls, too, start the graph
});
el.audio.addEventListener("error", () => {
  // after playback began (before it, play() rejects and explain() reports it)
  if (ogg.state !== "playing" && ogg.state !== "paused") return;
  ogg.state = "failed";
  ogg.error = { code: `media_error_${el.audio.error?.code ?? 0}`, message: el.audio.error?.message ?? "", status: null };
  el.status.textContent = "failed";
  showError("Ogg playback failed", el.audio.error?.message || "the <audio> element stopped with an error");
});
