// The Talk card's audio: its own AudioContext (made in the click, so it may run), an analyser on
// the microphone (the VAD meter's level) and one on the reply, which plays through its own
// <audio> element (Chromium renders a remote WebRTC stream only when a media element plays it).

import { rmsOf } from "./analysis.js";

export const talkAudio = {
  ctx: null,
  mic: null, // AnalyserNode on the microphone
  reply: null, // AnalyserNode on the remote stream
  micSource: null,
  replySource: null,
  element: null,
  buf: new Float32Array(512),
  peakReply: 0, // the loudest reply level measured since the talk started
  peakMic: 0, // the loudest microphone level measured since the talk started

  /** In the click handler, before any await: the context is then allowed to start. */
  prepare(element) {
    this.element = element;
    if (!this.ctx) {
      this.ctx = new AudioContext({ latencyHint: "interactive" });
      this.mic = new AnalyserNode(this.ctx, { fftSize: 512, smoothingTimeConstant: 0 });
      this.reply = new AnalyserNode(this.ctx, { fftSize: 512, smoothingTimeConstant: 0 });
      const sink = new GainNode(this.ctx, { gain: 0 }); // analysers only listen
      this.mic.connect(sink);
      this.reply.connect(sink);
      sink.connect(this.ctx.destination);
    }
    if (this.ctx.state !== "running") this.ctx.resume().catch(() => {});
    this.peakReply = 0;
    this.peakMic = 0;
  },

  listenTo(stream) {
    this.micSource?.disconnect();
    this.micSource = this.ctx.createMediaStreamSource(stream);
    this.micSource.connect(this.mic);
  },

  play(stream) {
    this.element.srcObject = stream;
    this.element.play().catch(() => {}); // the Talk click is the gesture; a refusal leaves it silent
    this.replySource?.disconnect();
    this.replySource = this.ctx.createMediaStreamSource(stream);
    this.replySource.connect(this.reply);
  },

  micLevel() {
    if (!this.micSource) return 0;
    const rms = rmsOf(this.mic, this.buf);
    if (rms > this.peakMic) this.peakMic = rms;
    return rms;
  },

  replyLevel() {
    if (!this.replySource) return 0;
    const rms = rmsOf(this.reply, this.buf);
    if (rms > this.peakReply) this.peakReply = rms;
    return rms;
  },

  stop() {
    this.micSource?.disconnect();
    this.replySource?.disconnect();
    this.micSource = this.replySource = null;
    if (this.element) {
      this.element.pause();
      this.element.srcObject = null;
    }
  },
};
