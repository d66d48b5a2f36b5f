// Talk: full duplex with the gateway (started with --duplex). The microphone (echo cancellation,
// noise suppression, gain control: the bot must not hear itself) goes up a sendrecv offer that
// also carries an `events` data channel; the reply comes down the same peer connection. The
// session's events arrive twice, over the data channel and over Server-Sent Events (GET
// …/events); talk-state.js applies each once. After each turn the gateway's own latencies are
// fetched (GET the session: duplex.turns) for the timeline.

import { GatewayError, describe } from "./http.js";
import { talkAudio } from "./talk-audio.js";
import { EVENT_TYPES, FINAL_STATES, changed, mergeServerTurns, receive, resetTalk, talk, turnOf } from "./talk-state.js";
import { Trickle } from "./trickle.js";
import { deleteSession, getSession, postOffer } from "./whep.js";

export const MIC_CONSTRAINTS = {
  audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
};
const POLL_MS = 1000; // the session's state while talking (turn latencies), besides after events
const ONSET_RMS = 0.02; // −34 dBFS: the reply has become audible
const QUIET_RMS = 0.01;
const ONSET_LIMIT_MS = 15_000;
const CONNECT_TIMEOUT_MS = 30_000;

let current = null; // {pc, stream, channel, source, trickle, abort, timers, ended}
let report = () => {}; // (title, message, err) → the page's error banner

export const talking = () => current !== null;

/** How the card reports a failure (main.js passes the page's error banner). */
export function onTalkError(fn) {
  report = fn;
}

export async function startTalk(element) {
  if (current) return;
  resetTalk();
  talk.state = "starting";
  talk.startedAt = performance.now();
  changed();
  const me = { pc: null, stream: null, channel: null, source: null, trickle: new Trickle(),
    abort: new AbortController(), timers: [], ended: false, refreshing: null };
  current = me;
  try {
    if (!navigator.mediaDevices?.getUserMedia) {
      throw new TalkError("No microphone", "this browser offers no microphone here: the page " +
        "must come from https:// or localhost (a secure context) to use one");
    }
    talkAudio.prepare(element); // before the first await: the click lets it start
    try {
      me.stream = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS);
    } catch (err) {
      throw new TalkError("Microphone refused", `${err.name}: ${err.message}`);
    }
    if (me.ended) return stopTracks(me);
    const [track] = me.stream.getAudioTracks();
    talk.mic = { label: track.label, settings: track.getSettings?.() ?? null };
    talkAudio.listenTo(me.stream);

    const pc = (me.pc = new RTCPeerConnection({ iceServers: [], bundlePolicy: "max-bundle" }));
    const transceiver = pc.addTransceiver(track, { direction: "sendrecv", streams: [me.stream] });
    openChannel(me, pc.createDataChannel("events"));
    pc.ontrack = (event) => talkAudio.play(event.streams[0] ?? new MediaStream([event.track]));
    pc.onicecandidate = (event) => me.trickle.add(event.candidate);
    pc.onconnectionstatechange = () => onConnection(me);
    await pc.setLocalDescription(await pc.createOffer());
    const offer = me.trickle.offer(pc.localDescription.sdp, transceiver.mid);
    const { answer, url, id } = await postOffer(offer, me.abort.signal);
    if (me.ended) return;
    talk.sessionUrl = url;
    talk.sessionId = id;
    me.url = url;
    // The audio section's direction: sendonly means the gateway will not listen (no --duplex).
    talk.answerDirection = answer.match(/^a=(sendrecv|sendonly|recvonly|inactive)\s*$/m)?.[1] ?? null;
    if (talk.answerDirection !== "sendrecv") {
      throw new TalkError("The gateway does not listen", `it answered the microphone ` +
        `${talk.answerDirection ?? "without a direction"}: start it with --duplex to talk to it`);
    }
    openEvents(me, url);
    await pc.setRemoteDescription({ type: "answer", sdp: answer });
    me.trickle.start(url);
    me.timers.push(setInterval(() => refresh(me), POLL_MS));
    me.timers.push(setTimeout(() => {
      if (!me.ended && pc.connectionState !== "connected") {
        fail(me, "Connection timed out", `no media path after ${CONNECT_TIMEOUT_MS / 1000} s ` +
          `(ICE ${pc.iceConnectionState})`);
      }
    }, CONNECT_TIMEOUT_MS));
  } catch (err) {
    if (me.ended) return; // stopped meanwhile
    const title = err instanceof TalkError ? err.title
      : err instanceof GatewayError && err.status ? "The gateway refused the microphone" : "Could not talk";
    await fail(me, title, err instanceof TalkError ? err.message : describe(err), err);
  }
}

class TalkError extends Error {
  constructor(title, message) {
    super(message);
    this.title = title;
  }
}

function openChannel(me, channel) {
  me.channel = channel;
  const state = () => {
    if (me.ended) return;
    talk.channel = channel.readyState;
    changed();
  };
  talk.channel = channel.readyState;
  channel.onopen = state;
  channel.onclose = state;
  channel.onerror = state;
  channel.onmessage = (message) => {
    if (me.ended) return;
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (event && typeof event.type === "string") onEvent(me, "channel", event);
  };
}

function openEvents(me, url) {
  const source = (me.source = new EventSource(`${url}/events`));
  talk.sse = "connecting";
  source.onopen = () => {
    if (me.ended) return;
    talk.sse = "open";
    changed();
  };
  source.onerror = () => {
    if (me.ended) return;
    // EventSource reconnects by itself; once the session is gone it gives up (closed)
    talk.sse = source.readyState === EventSource.CLOSED ? "closed" : "error";
    changed();
  };
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      if (me.ended) return;
      let data;
      try {
        data = JSON.parse(message.data);
      } catch {
        return;
      }
      onEvent(me, "sse", { type, ...data });
    });
  }
}

function onEvent(me, source, event) {
  if (!receive(source, event)) return;
  if (event.type === "reply") watchOnset(me, event.turn);
  // the gateway's timings for the turn: once its reply text, first audio and end are known
  if (event.type === "transcript" && event.final) refresh(me);
  if (event.type === "utterance" && (event.state === "playing" || FINAL_STATES.has(event.state))) refresh(me);
}

/** When the page first hears the reply to `turnNumber` (the reply analyser's level). */
function watchOnset(me, turnNumber) {
  const turn = turnOf(turnNumber);
  if (turn.client.audibleAt !== null || turn.watching) return;
  if (talkAudio.replyLevel() > QUIET_RMS) return; // something already plays: no clean onset
  turn.watching = true;
  const started = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    if (me.ended || now - started > ONSET_LIMIT_MS) {
      clearInterval(timer);
      turn.watching = false;
    } else if (talkAudio.replyLevel() > ONSET_RMS) {
      clearInterval(timer);
      turn.watching = false;
      turn.client.audibleAt = now;
      if (turn.client.stoppedAt !== null) turn.client.heardMs = now - turn.client.stoppedAt;
      changed();
    }
  }, 2);
  me.timers.push(timer);
}

/** GET the session: the turns' latencies (coalesced: one request at a time). */
function refresh(me) {
  if (me.ended || !me.url) return;
  if (me.refreshing) {
    me.again = true;
    return;
  }
  me.refreshing = getSession(me.url, me.abort.signal)
    .then((state) => {
      if (me.ended) return;
      talk.serverState = state;
      mergeServerTurns(state.duplex?.turns);
      changed();
    })
    .catch((err) => {
      if (me.ended || err.name === "AbortError") return;
      if (err instanceof GatewayError && err.status === 404) {
        fail(me, "Session ended", "the gateway closed this talking session");
      }
    })
    .finally(() => {
      me.refreshing = null;
      if (me.again) {
        me.again = false;
        refresh(me);
      }
    });
}

function onConnection(me) {
  if (me.ended) return;
  talk.connection = me.pc.connectionState;
  if (me.pc.connectionState === "connected") talk.state = "talking";
  if (me.pc.connectionState === "failed") {
    fail(me, "ICE failed", "no network path to the gateway worked (its --ice-hosts must be " +
      "reachable from this browser, and UDP not blocked)");
    return;
  }
  changed();
}

function stopTracks(me) {
  me.stream?.getTracks().forEach((t) => t.stop());
}

async function teardown(me) {
  if (me.ended) return;
  me.ended = true;
  if (current === me) current = null;
  me.abort.abort();
  me.trickle.stop();
  me.timers.forEach((id) => {
    clearInterval(id);
    clearTimeout(id);
  });
  me.source?.close();
  if (talk.sse !== "none") talk.sse = "closed";
  // DELETE before closing the peer: a closed peer makes the gateway end the session on its own
  const deleted = me.url ? deleteSession(me.url) : null;
  me.channel?.close();
  me.pc?.close();
  if (me.channel) talk.channel = "closed";
  stopTracks(me);
  talkAudio.stop();
  talk.speech = false;
  await deleted;
}

async function fail(me, title, message, err = null) {
  await teardown(me);
  talk.state = "failed";
  talk.error = { title, message, code: err?.code ?? null, status: err?.status ?? null };
  changed();
  report(title, message, err);
}

export async function stopTalk() {
  const me = current;
  if (!me) return;
  const done = teardown(me);
  talk.state = "closed";
  changed();
  await done;
}

/** The page is going away: end the session at the gateway too (keepalive DELETE). */
export function abandonTalk() {
  if (current?.url) deleteSession(current.url);
}
