// Live captions under the Speak card: the session's `word` events (GET …/events, Server-Sent
// Events), each sent by the gateway when its listener has heard the word begin (not when its
// frame was sent: docs/words.md). The line shows the current utterance's words heard so far,
// the latest one highlighted; a new utterance starts a new line. `gatewayDemo.captions` keeps
// what was shown, for tests: {utterance, words: [{word, start_ms, end_ms, at}], events, state}.

import { demo } from "./state.js";
import { $ } from "./ui.js";

const MAX_WORDS = 200; // kept per line: a long reply scrolls its oldest words away

const el = { line: $("captions") };
let source = null;

demo.captions = { utterance: null, words: [], events: 0, state: "closed" };

function render() {
  const { words } = demo.captions;
  const nodes = [];
  words.forEach((w, i) => {
    if (i) nodes.push(" ");
    const span = document.createElement("span");
    span.className = i === words.length - 1 ? "word current" : "word heard";
    span.textContent = w.word;
    nodes.push(span);
  });
  el.line.replaceChildren(...nodes);
}

function onWord(event) {
  const data = JSON.parse(event.data);
  const captions = demo.captions;
  captions.events++;
  if (data.utterance !== captions.utterance) {
    captions.utterance = data.utterance;
    captions.words = [];
  }
  captions.words.push({ word: data.word, start_ms: data.start_ms, end_ms: data.end_ms, at: performance.now() });
  if (captions.words.length > MAX_WORDS) captions.words.shift();
  render();
}

function onUtterance(event) {
  const { id, state } = JSON.parse(event.data);
  // the utterance ended (or was cut): nothing is "current" any more
  if (id === demo.captions.utterance && (state === "done" || state === "interrupted")) {
    el.line.querySelector(".current")?.classList.replace("current", "heard");
  }
}

/** Follow the Speak card's session `url` (its events stream). */
export function startCaptions(url) {
  stopCaptions();
  demo.captions = { utterance: null, words: [], events: 0, state: "connecting" };
  render();
  source = new EventSource(`${url}/events`);
  source.addEventListener("open", () => (demo.captions.state = "open"));
  source.addEventListener("error", () => {
    // EventSource reconnects by itself; once the session is gone it gives up (closed)
    if (source?.readyState === EventSource.CLOSED) demo.captions.state = "closed";
  });
  source.addEventListener("word", onWord);
  source.addEventListener("utterance", onUtterance);
}

export function stopCaptions() {
  source?.close();
  source = null;
  demo.captions.state = "closed";
}
