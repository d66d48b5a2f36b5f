// Speak and Interrupt, and what the listener hears of them: "sound after N ms" (the Speak click
// → THIS utterance's first sound) and "silent N ms after Interrupt".
//
// Sound after: the gateway reports the RTP timestamp of the utterance's first packet
// (`first_timestamp`, GET its location) once it has sent it, and Playout dates when Chromium's
// receiver played that packet. When nothing was playing at the click, the onset in the audio
// graph is the figure, as heard: the AudioWorklet detector's first sample at or above −34 dBFS,
// dated when it reaches the output (audio.onset) — unless it came before the utterance's first
// packet even played, when it was someone else's sound. When speech was playing (or an earlier
// click is still to be heard) the level cannot tell where this utterance begins: the figure is
// when the receiver played its first packet plus the receiver → output delay this session last
// measured (an onset minus its packet's playout), or the output latency before any was.

import { SILENCE_HOLD_MS, SILENT_RMS, audio, watch } from "./audio.js";
import { describe } from "./http.js";
import { currentSession } from "./session.js";
import { demo } from "./state.js";
import { clearError, showError, showLatency, ui } from "./ui.js";
import { getUtterance, interruptSpeech, postSpeech } from "./whep.js";

const FINAL_STATES = new Set(["done", "interrupted", "failed"]);
const BUSY_HOLD_MS = 300; // heard this recently: speech is playing (a pause between words is shorter)
const POLL_MS = 40; // GET the utterance this often until it has a first_timestamp
const ONSET_SLACK_MS = 50; // an onset earlier than this before the first packet played is not ours
const ONSET_WAIT_MS = 1000; // how long after its first packet played the onset may come
const SOUND_LIMIT_MS = 120_000; // give up on hearing an utterance (it may wait behind others)
const KEEP = 10; // Speak clicks kept in demo.speeches

let readout = null; // whose figure #latency shows: a Speak or an Interrupt record

function show(owner, text) {
  if (readout === owner) showLatency(text);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function speak() {
  const current = currentSession();
  if (!current?.url) return;
  const text = ui.text.value.trim();
  if (!text) {
    showError("Nothing to say", "type some text first");
    return;
  }
  const clickedAt = performance.now();
  const body = { text, interrupt: ui.cutIn.checked };
  if (!ui.voiceField.hidden && ui.voice.value) body.voice = ui.voice.value;
  const busy = audio.audibleWithin(BUSY_HOLD_MS) || current.speaking.size > 0;
  const record = {
    clickedAt,
    text, // what was asked for, and in which voice (null: the gateway's default)
    voice: body.voice ?? null,
    acceptedAt: null,
    audibleAt: null, // when this utterance's sound began (performance.now())
    ms: null, // audibleAt − clickedAt: the "sound after" figure
    method: null, // "onset" (audio graph) | "rtp" (receiver played its first packet) | null
    busy, // speech was playing (or due) at the click
    utterance: null, // the gateway's 202 body
    state: null, // the utterance's state when last polled
    firstTimestamp: null, // RTP timestamp of its first packet
    playedAt: null, // when the receiver played that packet
    onsetAt: null, // the onset, at the output (idle stream only)
    onsetRenderedAt: null, // ... when the audio graph rendered it
    onsetSource: null, // "worklet" | "analyser" (no AudioWorklet)
    pipelineMs: null, // the receiver → output delay added to a "rtp" figure
    done: false,
  };
  demo.lastSpeak = record;
  demo.speeches.push(record);
  if (demo.speeches.length > KEEP) demo.speeches.shift();
  current.speaking.add(record);
  current.playout.hold(); // from the click on, so the packet cannot play unseen
  readout = record;
  showLatency("waiting for sound…");
  const stop = new AbortController();
  const onset = busy ? null : audio.onset({ limitMs: SOUND_LIMIT_MS, signal: stop.signal });
  try {
    try {
      record.utterance = await postSpeech(current.url, body);
      record.acceptedAt = performance.now();
      clearError();
    } catch (err) {
      show(record, "");
      showError("Speech refused", describe(err), err);
      return;
    }
    const at = await soundAt(current, record, onset);
    if (at !== null) {
      record.audibleAt = at;
      record.ms = at - clickedAt;
      show(record, `sound after ${record.ms.toFixed(0)} ms`);
    } else {
      show(record, record.state ? `no sound (${record.state})` : "no sound");
    }
  } finally {
    stop.abort();
    current.speaking.delete(record);
    current.playout.release();
    record.done = true;
  }
}

/** When this utterance's sound began, or null when it never played. */
async function soundAt(current, record, onset) {
  const ts = await firstTimestamp(current, record);
  if (ts === null) return null; // never sent: interrupted, failed, or the session is over
  record.firstTimestamp = ts;
  const played = await current.playout.when(ts);
  record.playedAt = played;
  if (onset) {
    const heard = await Promise.race([onset, sleep(ONSET_WAIT_MS).then(() => null)]);
    if (heard !== null) {
      record.onsetAt = heard.at;
      record.onsetRenderedAt = heard.renderedAt;
      record.onsetSource = heard.source;
    }
    if (heard !== null && (played === null || heard.at >= played - ONSET_SLACK_MS)) {
      record.method = "onset";
      if (played !== null && heard.source === "worklet") current.pipelineMs = heard.at - played;
      return heard.at;
    }
  }
  if (played === null) return null;
  record.method = "rtp";
  record.pipelineMs = current.pipelineMs ?? audio.outputLatency() * 1000;
  return played + record.pipelineMs;
}

/** Poll the utterance until the gateway has sent its first packet: that packet's RTP timestamp. */
async function firstTimestamp(current, record) {
  const { location } = record.utterance;
  const started = performance.now();
  while (!current.ended && performance.now() - started < SOUND_LIMIT_MS) {
    try {
      const u = await getUtterance(location, current.abort.signal);
      record.state = u.state;
      if (Number.isInteger(u.first_timestamp)) return u.first_timestamp >>> 0;
      if (FINAL_STATES.has(u.state)) return null;
    } catch (err) {
      if (err.name === "AbortError" || err.status === 404) return null; // over, or forgotten
      // anything else may pass: ask again
    }
    await sleep(POLL_MS);
  }
  return null;
}

export async function interrupt() {
  const current = currentSession();
  if (!current?.url) return;
  const clickedAt = performance.now();
  const wasAudible = audio.audibleWithin(100);
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
    record.interrupted = (await interruptSpeech(current.url)).interrupted;
    record.respondedAt = performance.now();
  } catch (err) {
    showError("Interrupt failed", describe(err), err);
  }
  const at = await silent;
  if (at !== null) {
    record.silentAt = at;
    record.ms = at - clickedAt;
    readout = record;
    show(record, `silent ${record.ms.toFixed(0)} ms after Interrupt`);
  }
  record.done = true;
}
