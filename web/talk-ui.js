// The Talk card: its buttons and state, the VAD meter (the microphone's level, coloured while the
// gateway's VAD hears speech), the reply level, the live partial transcript, the conversation
// turn by turn, the latency timeline and its figures, and how many events came by which path.

import { talkAudio } from "./talk-audio.js";
import { onTalkChange, talk } from "./talk-state.js";
import { SEGMENTS, drawTimeline, segmentsOf } from "./timeline.js";
import { $ } from "./ui.js";

export const talkUi = {
  start: $("talk-start"),
  stop: $("talk-stop"),
  state: $("talk-state"),
  vad: $("talk-vad"),
  micBar: $("talk-mic-bar"),
  replyBar: $("talk-reply-bar"),
  partial: $("talk-partial"),
  log: $("talk-log"),
  timeline: $("talk-timeline"),
  latency: $("talk-latency"),
  legend: $("talk-legend"),
  events: $("talk-events"),
  audio: $("talk-remote"),
};

const LABELS = {
  idle: "Not talking",
  starting: "Starting…",
  talking: "Listening",
  failed: "Failed",
  closed: "Stopped",
};
const PILL = { idle: "idle", starting: "connecting", talking: "connected", failed: "failed", closed: "closed" };
const METER_MS = 50;
const TURNS_SHOWN = 6;

let scheduled = false;

function render() {
  scheduled = false;
  const live = talk.state === "starting" || talk.state === "talking";
  talkUi.start.disabled = live;
  talkUi.stop.disabled = !live;
  talkUi.state.dataset.state = PILL[talk.state] ?? "idle";
  talkUi.state.textContent = LABELS[talk.state] ?? talk.state;
  talkUi.vad.dataset.speech = String(talk.speech);
  talkUi.vad.textContent = !live ? "VAD –" : talk.speech ? "VAD: speech" : "VAD: silence";
  talkUi.partial.textContent = talk.partial ? `… ${talk.partial}` : "";
  renderLog();
  const drawn = drawTimeline(talkUi.timeline, talk.turns);
  talkUi.timeline.dataset.rows = String(drawn);
  renderLatency();
  const { sse, channel } = talk.events;
  const sum = (counts) => Object.values(counts).reduce((a, b) => a + b, 0);
  talkUi.events.textContent =
    `Events: ${sum(channel)} over the data channel (${talk.channel}), ` +
    `${sum(sse)} over SSE (${talk.sse}), ${talk.events.total} distinct`;
}

/** Re-render once per frame however many events came. */
function schedule() {
  if (scheduled) return;
  scheduled = true;
  if (document.hidden) setTimeout(render, 50); // no frames in a background tab
  else requestAnimationFrame(render);
}

function renderLog() {
  const turns = talk.turns.filter((t) => t.text || t.partial || t.reply.length).slice(-TURNS_SHOWN);
  talkUi.log.replaceChildren(
    ...turns.map((turn) => {
      const li = document.createElement("li");
      li.dataset.turn = String(turn.turn);
      const you = document.createElement("p");
      you.className = "you";
      you.textContent = turn.text || `… ${turn.partial}`;
      if (!turn.text) you.classList.add("partial");
      li.append(you);
      if (turn.reply.length) {
        const bot = document.createElement("p");
        bot.className = "bot";
        bot.append(...captionOf(turn));
        const states = turn.utterances.map((id) => talk.utterances[id]).filter(Boolean);
        const state = document.createElement("span");
        state.className = "state";
        state.textContent = turn.interrupted ? "interrupted" : states.at(-1) ?? "queued";
        state.dataset.state = state.textContent;
        bot.append(" ", state);
        li.append(bot);
      }
      if (turn.error) {
        const error = document.createElement("p");
        error.className = "turn-error";
        error.textContent = turn.error;
        li.append(error);
      }
      return li;
    }),
  );
}

/**
 * The reply as captions: each clause's words, those the gateway said were heard (its `word`
 * events) marked heard, the latest one current while its utterance plays, the rest unheard.
 * The words are matched by count: the gateway's words are the clause's whitespace words.
 */
function captionOf(turn) {
  const nodes = [];
  turn.reply.forEach((text, i) => {
    const id = turn.utterances[i];
    const heard = talk.words[id]?.length ?? 0;
    const playing = talk.utterances[id] === "playing";
    text.split(/\s+/).filter(Boolean).forEach((word, j) => {
      if (nodes.length) nodes.push(" ");
      const span = document.createElement("span");
      span.className = j >= heard ? "word unheard" : j === heard - 1 && playing ? "word current" : "word heard";
      span.textContent = word;
      nodes.push(span);
    });
  });
  return nodes;
}

function renderLatency() {
  const rows = talk.turns.map((turn) => ({ turn, ...segmentsOf(turn) }))
    .filter((r) => r.segments.length).slice(-TURNS_SHOWN).reverse();
  talkUi.latency.replaceChildren(
    ...rows.map((r) => {
      const li = document.createElement("li");
      const parts = r.segments.map((s) => `${s.label} ${Math.round(s.ms)}`);
      const total = r.total !== null ? `${Math.round(r.total)} ms end of speech → audio` : "";
      const heard = r.heard !== null ? ` · heard here after ${Math.round(r.heard)} ms` : "";
      li.textContent = `#${r.turn.turn}: ${total} (${parts.join(" · ")})${heard}` +
        (r.source === "events" ? " *from the events" : "");
      return li;
    }),
  );
}

function meter(bar, rms) {
  const db = 20 * Math.log10(Math.max(rms, 1e-6)); // −60…0 dBFS → 0…1
  const fill = Math.round(Math.max(0, Math.min(1, (db + 60) / 60)) * 100) / 100;
  if (bar.dataset.fill === String(fill)) return;
  bar.dataset.fill = String(fill);
  bar.style.transform = `scaleX(${fill})`;
}

let meterAt = 0;
function meters(now) {
  requestAnimationFrame(meters);
  if (now - meterAt < METER_MS) return;
  meterAt = now;
  meter(talkUi.micBar, talkAudio.micLevel());
  meter(talkUi.replyBar, talkAudio.replyLevel());
  talkUi.micBar.classList.toggle("speech", talk.speech);
}

export function startTalkUi() {
  talkUi.legend.replaceChildren(
    ...SEGMENTS.map((s) => {
      const item = document.createElement("span");
      item.className = "key";
      item.dataset.segment = s.key;
      item.textContent = s.label;
      return item;
    }),
    Object.assign(document.createElement("span"), { className: "key heard", textContent: "heard here" }),
  );
  onTalkChange(schedule);
  new ResizeObserver(schedule).observe(talkUi.timeline);
  render();
  requestAnimationFrame(meters);
}
