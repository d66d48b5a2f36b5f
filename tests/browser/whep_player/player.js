// A minimal WHEP player built on a third-party client: medooze's whip-whep (npm), served as the
// package ships it (an ES module, no build step). The test drives it through window.player.

import { WHEPClient } from "./lib/whep.js";

const element = document.getElementById("remote");
let ctx = null;
let analyser = null;
const buf = new Float32Array(1024);

export const player = {
  whep: null,
  pc: null,
  tracks: 0,
  errors: [],

  /** view() the endpoint (the gateway's POST /v1/sessions) with a recvonly audio transceiver. */
  async view(endpoint) {
    ctx = new AudioContext();
    analyser = new AnalyserNode(ctx, { fftSize: 1024, smoothingTimeConstant: 0 });
    const sink = new GainNode(ctx, { gain: 0 });
    analyser.connect(sink);
    sink.connect(ctx.destination);
    const pc = (this.pc = new RTCPeerConnection({ bundlePolicy: "max-bundle" }));
    pc.addTransceiver("audio", { direction: "recvonly" });
    pc.ontrack = (event) => {
      this.tracks++;
      const stream = event.streams[0] ?? new MediaStream([event.track]);
      element.srcObject = stream; // Chromium renders remote audio only for a playing element
      element.play().catch((err) => this.errors.push(String(err)));
      ctx.createMediaStreamSource(stream).connect(analyser);
    };
    const whep = (this.whep = new WHEPClient());
    await whep.view(pc, endpoint);
    return { resource: String(whep.resourceURL), etag: whep.etag ?? null };
  },

  level() {
    if (!analyser) return 0;
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (const v of buf) sum += v * v;
    return Math.sqrt(sum / buf.length);
  },

  async stats() {
    const report = await this.pc.getStats();
    let inbound = null;
    let pair = null;
    report.forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "audio") inbound = s;
      if (s.type === "transport" && s.selectedCandidatePairId) pair = report.get(s.selectedCandidatePairId);
    });
    const local = pair ? report.get(pair.localCandidateId) : null;
    let transport = null;
    report.forEach((s) => {
      if (s.type === "transport") transport = s;
    });
    return {
      packetsReceived: inbound?.packetsReceived ?? 0,
      connectionState: this.pc.connectionState,
      iceConnectionState: this.pc.iceConnectionState,
      localUfrag: this.pc.localDescription?.sdp.match(/a=ice-ufrag:(.*)\r\n/)?.[1] ?? null,
      remoteUfrag: this.pc.remoteDescription?.sdp.match(/a=ice-ufrag:(.*)\r\n/)?.[1] ?? null,
      localCandidate: local ? `${local.address}:${local.port}` : null,
      // the ufrag ICE now uses (RTCTransportStats): it changes when a restart took effect
      iceLocalUfrag: transport?.iceLocalUsernameFragment ?? null,
      iceState: transport?.iceState ?? null,
    };
  },

  /** The library's ICE restart: a new offer's credentials PATCHed with If-Match. */
  async restart() {
    await this.whep.restart();
    return { etag: this.whep.etag ?? null };
  },

  async stop() {
    await this.whep.stop();
  },
};

window.addEventListener("unhandledrejection", (event) => player.errors.push(String(event.reason)));
window.player = player;
