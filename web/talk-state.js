// The Talk card's state, window.gatewayDemo.talk: what the gateway heard and said, turn by turn.
//
// Every event comes twice, over Server-Sent Events and over the `events` data channel; each is
// counted per source, and applied once: an event is applied when its source has now delivered it
// more often than it has been applied (so an event repeated on purpose, such as the same partial
// transcript twice, is applied twice, and its copy from the other source not at all).

const KEEP = 50; // transcripts, replies, errors kept
export const EVENT_TYPES = [
  "speech_started", "speech_stopped", "transcript", "reply", "utterance", "interrupted", "word",
  "error",
];
export const FINAL_STATES = new Set(["done", "interrupted", "failed"]);

export const talk = {
  state: "idle", // idle | starting | talking | failed | closed
  sessionId: null,
  sessionUrl: null,
  answerDirection: null, // the gateway's audio direction: sendrecv when it listens
  channel: "none", // the events data channel's readyState (none before one is made)
  sse: "none", // none | connecting | open | error | closed
  connection: "new", // the peer connection's connectionState
  mic: null, // {label, settings} of the microphone track
  speech: false, // the gateway's VAD: between speech_started and speech_stopped
  partial: "", // the latest partial transcript of the turn being heard ("" once final)
  partialTurn: null,
  transcripts: [], // {turn, text, final, at}
  replies: [], // {turn, text, utterance, state, at}
  utterances: {}, // id → latest state
  interrupted: [], // utterance ids cut by barge-in
  words: {}, // utterance id → [{word, start_ms, end_ms}], each as the gateway says it was heard
  errors: [], // {code, message, turn}
  turns: [], // by turn number; see turnOf
  events: { sse: {}, channel: {}, applied: {}, total: 0, first: null },
  serverState: null, // the last GET /v1/sessions/{id}
  error: null,
  startedAt: null,
};

let delivered = { sse: new Map(), channel: new Map() };
let applied = new Map();
const listeners = new Set();

export function resetTalk() {
  Object.assign(talk, {
    state: "idle", sessionId: null, sessionUrl: null, answerDirection: null, channel: "none",
    sse: "none", connection: "new", mic: null, speech: false, partial: "", partialTurn: null, transcripts: [],
    replies: [], utterances: {}, interrupted: [], words: {}, errors: [], turns: [],
    events: { sse: {}, channel: {}, applied: {}, total: 0, first: null },
    serverState: null, error: null, startedAt: null,
  });
  delivered = { sse: new Map(), channel: new Map() };
  applied = new Map();
}

/** Call `fn(event)` after each applied event (the card re-renders). */
export function onTalkChange(fn) {
  listeners.add(fn);
}

export function changed(event = null) {
  for (const fn of listeners) fn(event);
}

/** The turn record for number `n`, made on first mention. */
export function turnOf(n) {
  let turn = talk.turns.find((t) => t.turn === n);
  if (!turn) {
    turn = {
      turn: n,
      text: "", // the final transcript
      partial: "",
      reply: [], // clauses, as the agent said them
      utterances: [],
      interrupted: false,
      error: null,
      latency: null, // the gateway's latency_ms (GET the session), once it has them
      // performance.now() of what the page saw: events' arrival, and the reply's first sound
      client: {
        startedAt: null, stoppedAt: null, durationMs: null, finalAt: null, replyAt: null,
        audibleAt: null, heardMs: null, // heardMs: speech_stopped event → reply audible here
      },
    };
    talk.turns.push(turn);
    talk.turns.sort((a, b) => a.turn - b.turn);
    if (talk.turns.length > KEEP) talk.turns.shift();
  }
  return turn;
}

const push = (list, item) => {
  list.push(item);
  if (list.length > KEEP) list.shift();
};

/**
 * One event from `source` ("sse" | "channel"): `{type, ...data}`. Returns whether it was applied
 * (false: the other source delivered it first).
 */
export function receive(source, event) {
  const { type } = event;
  const counts = talk.events[source];
  counts[type] = (counts[type] ?? 0) + 1;
  const key = JSON.stringify(event);
  const mine = (delivered[source].get(key) ?? 0) + 1;
  delivered[source].set(key, mine);
  const done = applied.get(key) ?? 0;
  if (mine <= done) return false;
  applied.set(key, done + 1);
  if (applied.size > 4000) {
    // a long talk: forget old keys (a late duplicate may then be applied twice, harmlessly)
    applied = new Map([...applied].slice(-1000));
    delivered = { sse: new Map(), channel: new Map() };
  }
  talk.events.applied[type] = (talk.events.applied[type] ?? 0) + 1;
  talk.events.total++;
  talk.events.first ??= source;
  apply(event, performance.now());
  changed(event);
  return true;
}

function apply(event, now) {
  switch (event.type) {
    case "speech_started": {
      talk.speech = true;
      turnOf(event.turn).client.startedAt = now;
      break;
    }
    case "speech_stopped": {
      talk.speech = false;
      const { client } = turnOf(event.turn);
      client.stoppedAt = now;
      client.durationMs = event.duration_ms ?? null;
      break;
    }
    case "transcript": {
      const turn = turnOf(event.turn);
      push(talk.transcripts, { turn: event.turn, text: event.text, final: !!event.final, at: now });
      if (event.final) {
        turn.text = event.text;
        turn.partial = "";
        turn.client.finalAt = now;
        if (talk.partialTurn !== null && talk.partialTurn <= event.turn) talk.partial = "";
      } else {
        turn.partial = event.text;
        talk.partial = event.text;
        talk.partialTurn = event.turn;
      }
      break;
    }
    case "reply": {
      const turn = turnOf(event.turn);
      turn.reply.push(event.text);
      turn.utterances.push(event.utterance);
      turn.client.replyAt ??= now;
      const state = talk.utterances[event.utterance] ?? "queued";
      push(talk.replies, { turn: event.turn, text: event.text, utterance: event.utterance, state, at: now });
      break;
    }
    case "utterance": {
      talk.utterances[event.id] = event.state;
      for (const reply of talk.replies) if (reply.utterance === event.id) reply.state = event.state;
      break;
    }
    case "word": {
      const words = (talk.words[event.utterance] ??= []);
      words.push({ word: event.word, start_ms: event.start_ms, end_ms: event.end_ms });
      const ids = Object.keys(talk.words);
      if (ids.length > KEEP) delete talk.words[ids[0]];
      break;
    }
    case "interrupted": {
      push(talk.interrupted, event.utterance);
      for (const turn of talk.turns) if (turn.utterances.includes(event.utterance)) turn.interrupted = true;
      break;
    }
    case "error": {
      push(talk.errors, { code: event.code, message: event.message, turn: event.turn ?? null });
      if (event.turn !== undefined) turnOf(event.turn).error = event.message;
      break;
    }
    default:
      break;
  }
}

/** Merge the gateway's view of the turns (GET /v1/sessions/{id} → duplex.turns). */
export function mergeServerTurns(turns) {
  for (const t of turns ?? []) {
    const turn = turnOf(t.turn);
    if (t.text) turn.text = t.text;
    turn.latency = t.latency_ms ?? turn.latency;
    turn.interrupted ||= !!t.interrupted;
    turn.error = t.error ?? turn.error;
    turn.serverReply = t.reply ?? null;
    if (Array.isArray(t.utterances) && t.utterances.length >= turn.utterances.length) {
      turn.utterances = [...t.utterances];
    }
  }
}
