// The "Realtime" card: the OpenAI Realtime protocol as any app written for it speaks it, with our
// own small WebRTC + events code (no SDK, no build step). An ephemeral key from POST
// /v1/realtime/client_secrets, then the offer (microphone sendrecv + the `oai-events` data
// channel) to POST /v1/realtime/calls; the reply is RTP on the same peer connection, the
// events (transcripts, response states, output_audio_buffer.*) are JSON on the channel.
// State for tests and curious users: window.gatewayDemo.realtime.

import { api, describe } from "./http.js";
import { MIC_CONSTRAINTS } from "./talk.js";

export const realtime = {
  state: "idle", // idle | connecting | connected | failed
  error: null,
  callId: null,
  events: {}, // event type -> count
  log: [], // [{role: "user" | "assistant", text}]
  playing: false, // between output_audio_buffer.started and .stopped/.cleared
};

let current = null; // {pc, channel, stream, element}

/** The reply as Chromium received it: inbound-rtp audio stats (null when not connected). */
Object.defineProperty(realtime, "inbound", {
  value: async () => {
    if (!current?.pc) return null;
    for (const s of (await current.pc.getStats()).values()) {
      if (s.type === "inbound-rtp" && s.kind === "audio") {
        return { packetsReceived: s.packetsReceived, audioLevel: s.audioLevel ?? 0,
          totalSamplesReceived: s.totalSamplesReceived ?? 0 };
      }
    }
    return null;
  },
});
let onChange = () => {};

export function onRealtimeChange(fn) {
  onChange = fn;
}

function changed() {
  onChange(realtime);
}

function send(event) {
  if (current?.channel?.readyState === "open") current.channel.send(JSON.stringify(event));
}

function apply(event) {
  realtime.events[event.type] = (realtime.events[event.type] ?? 0) + 1;
  switch (event.type) {
    case "conversation.item.input_audio_transcription.completed":
      realtime.log.push({ role: "user", text: event.transcript });
      break;
    case "response.output_audio_transcript.done":
    case "response.output_text.done":
      realtime.log.push({ role: "assistant", text: event.transcript ?? event.text });
      break;
    case "output_audio_buffer.started":
      realtime.playing = true;
      break;
    case "output_audio_buffer.stopped":
    case "output_audio_buffer.cleared":
      realtime.playing = false;
      break;
    case "error":
      realtime.error = event.error?.message ?? "error";
      break;
    default:
      break;
  }
  changed();
}

export async function startRealtime(element, { instructions = "" } = {}) {
  if (current) return;
  Object.assign(realtime, { state: "connecting", error: null, callId: null, events: {}, log: [] });
  changed();
  const me = { pc: null, channel: null, stream: null, element };
  current = me;
  try {
    const secret = await api("v1/realtime/client_secrets", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ session: { type: "realtime", instructions } }),
    });
    const key = (await secret.json()).value;
    me.stream = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS);
    const pc = (me.pc = new RTCPeerConnection({ iceServers: [], bundlePolicy: "max-bundle" }));
    pc.addTrack(me.stream.getAudioTracks()[0], me.stream);
    pc.ontrack = (e) => {
      element.srcObject = e.streams[0] ?? new MediaStream([e.track]);
      element.play().catch(() => {});
    };
    me.channel = pc.createDataChannel("oai-events");
    me.channel.onmessage = (m) => apply(JSON.parse(m.data));
    const opened = new Promise((resolve) => { me.channel.onopen = resolve; });
    await pc.setLocalDescription(await pc.createOffer());
    const answer = await api("v1/realtime/calls", {
      method: "POST",
      headers: { "Content-Type": "application/sdp", Authorization: `Bearer ${key}` },
      body: pc.localDescription.sdp,
    });
    realtime.callId = answer.headers.get("Location")?.split("/").pop() ?? null;
    await pc.setRemoteDescription({ type: "answer", sdp: await answer.text() });
    await opened;
    realtime.state = "connected";
    changed();
  } catch (err) {
    realtime.state = "failed";
    realtime.error = describe(err);
    stopRealtime();
    realtime.state = "failed";
    changed();
  }
}

/** A typed turn: a user message, then a response (audio and its transcript). */
export function sayToRealtime(text) {
  send({ type: "conversation.item.create",
    item: { type: "message", role: "user", content: [{ type: "input_text", text }] } });
  send({ type: "response.create" });
}

export function stopRealtime() {
  const me = current;
  current = null;
  if (!me) return;
  me.stream?.getTracks().forEach((t) => t.stop());
  me.channel?.close();
  me.pc?.close();
  if (me.element) me.element.srcObject = null;
  realtime.state = "idle";
  realtime.playing = false;
  changed();
}
