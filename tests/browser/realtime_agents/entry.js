// The OpenAI Agents SDK's Realtime session over its WebRTC transport, unmodified, pointed at the
// gateway that serves this page (same origin). Bundled by esbuild into bundle.js by the test.
import { OpenAIRealtimeWebRTC, RealtimeAgent, RealtimeSession } from "@openai/agents-realtime";

const state = { status: "idle", error: null, events: [], transcripts: [], callId: null,
  maxLevel: 0, secret: null };
window.agentsTest = state;

function watchLevel(audio) {
  // the reply's loudness as the page hears it (WebAudio on the element's stream)
  const poll = () => {
    const stream = audio.srcObject;
    if (!stream) { setTimeout(poll, 50); return; }
    const ctx = new AudioContext();
    const analyser = ctx.createAnalyser();
    ctx.createMediaStreamSource(stream).connect(analyser);
    const buf = new Float32Array(analyser.fftSize);
    setInterval(() => {
      analyser.getFloatTimeDomainData(buf);
      let sum = 0;
      for (const v of buf) sum += v * v;
      state.maxLevel = Math.max(state.maxLevel, Math.sqrt(sum / buf.length));
    }, 20);
  };
  poll();
}

window.agentsConnect = async ({ token = null, instructions = "Repeat what you hear." } = {}) => {
  try {
    state.status = "secret";
    const headers = { "Content-Type": "application/json" };
    if (token) headers.Authorization = `Bearer ${token}`;
    const reply = await fetch("/v1/realtime/client_secrets", {
      method: "POST", headers,
      body: JSON.stringify({ session: { type: "realtime", model: "gpt-realtime" } }),
    });
    if (!reply.ok) throw new Error(`client_secrets: ${reply.status} ${await reply.text()}`);
    const secret = await reply.json();
    state.secret = secret.value;
    const audio = document.createElement("audio");
    audio.muted = true; // the test reads the stream, not the speakers
    document.body.appendChild(audio);
    const transport = new OpenAIRealtimeWebRTC({
      baseUrl: `${location.origin}/v1/realtime/calls`, audioElement: audio,
    });
    const agent = new RealtimeAgent({ name: "echo", instructions });
    const session = new RealtimeSession(agent, { transport, model: "gpt-realtime" });
    session.on("transport_event", (event) => {
      state.events.push(event.type);
      if (event.type === "conversation.item.input_audio_transcription.completed") {
        state.transcripts.push(event.transcript);
      }
    });
    session.on("error", (e) => { state.error = String(e?.error?.message ?? e?.error ?? e); });
    state.status = "connecting";
    watchLevel(audio);
    await session.connect({ apiKey: secret.value });
    state.callId = transport.callId ?? null;
    state.status = "connected";
    window.agentsSession = session;
  } catch (e) {
    state.status = "failed";
    state.error = String(e?.message ?? e);
  }
};
