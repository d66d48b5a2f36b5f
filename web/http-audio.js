// The HTTP modes' audio graph, made when the page loads so that a click only has to resume it
// (and the worklet module is compiled before anyone waits for it):
//
//   AudioWorkletNode "http-playout" ─┬─────────────────► destination     fetch + WebCodecs
//                                    └─► stream tap (level, spectrum)
//   <audio id="ogg-audio"> ─ MediaElementSource ─┬─────► destination     the Ogg URL
//                                                └─► ogg tap (level, spectrum)
//
// One AudioContext at 48 kHz: Chromium's Opus decoder hands out 48 kHz whatever sampleRate the
// decoder was configured with, so the decoded frames go to the worklet as they are (a mismatch
// elsewhere is resampled in http-stream.js). It is separate from the WebRTC stream's context
// (audio.js), so neither mode's analysers hear the other.

import { peakFrequency, rmsOf } from "./analysis.js";

export const CONTEXT_RATE = 48_000;
export const RING_FRAMES = 8; // the PCM ring in the worklet, in 20 ms frames
const WORKLET_URL = new URL("./http-playout-worklet.js", import.meta.url);

/** Level and spectrum of one source: a short window for level, a long FFT for the peak. */
class Tap {
  constructor(ctx, source) {
    this.level = new AnalyserNode(ctx, { fftSize: 256, smoothingTimeConstant: 0 });
    this.freq = new AnalyserNode(ctx, { fftSize: 8192, smoothingTimeConstant: 0 }); // 0.17 s
    this.timeBuf = new Float32Array(this.level.fftSize);
    this.freqBuf = new Float32Array(this.freq.frequencyBinCount);
    source.connect(this.level);
    source.connect(this.freq);
    // analysers only listen; a muted sink keeps them pulled by the graph
    const sink = new GainNode(ctx, { gain: 0 });
    this.level.connect(sink);
    this.freq.connect(sink);
    sink.connect(ctx.destination);
  }

  rms() {
    return rmsOf(this.level, this.timeBuf);
  }

  dominantFrequency() {
    return peakFrequency(this.freq, this.freqBuf);
  }
}

export const graph = {
  ctx: null,
  node: null, // the playout worklet
  stream: null, // Tap on the worklet's output
  ogg: null, // Tap on the <audio> element (made on its first play)
  oggSource: null,
  ready: null, // Promise: the worklet is loaded (rejects where the browser cannot)
  error: null, // why the HTTP stream mode cannot work here, or null

  /** Build the graph (once). Without a user gesture yet, the context waits suspended. */
  prepare() {
    this.ready ??= this.build().catch((err) => {
      this.error = err.message ?? String(err);
      throw err;
    });
    this.ready.catch(() => {}); // reported through `error` and the Play button
    return this.ready;
  },

  async build() {
    if (typeof AudioWorkletNode === "undefined" || !window.isSecureContext) {
      throw new Error("this page needs AudioWorklet (a secure context: https or localhost)");
    }
    this.ctx = new AudioContext({ sampleRate: CONTEXT_RATE, latencyHint: "interactive" });
    await this.ctx.audioWorklet.addModule(WORKLET_URL);
    this.node = new AudioWorkletNode(this.ctx, "http-playout", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { ringFrames: RING_FRAMES },
    });
    this.node.connect(this.ctx.destination);
    this.stream = new Tap(this.ctx, this.node);
  },

  /** From a click: start (or keep) the context running. Resolves once it runs. */
  async resume() {
    await this.prepare();
    if (this.ctx.state !== "running") await this.ctx.resume();
  },

  /** Route the <audio> element through the graph (a media element can be routed only once). */
  tapElement(element) {
    if (this.oggSource) return;
    this.oggSource = this.ctx.createMediaElementSource(element);
    this.oggSource.connect(this.ctx.destination);
    this.ogg = new Tap(this.ctx, this.oggSource);
  },

  streamRms() {
    return this.stream ? this.stream.rms() : 0;
  },

  oggRms() {
    return this.ogg ? this.ogg.rms() : 0;
  },
};

/** performance.now() time of a Date.now() reading (the worklet scope has only Date). */
export const wallToPerf = (wall) => wall - performance.timeOrigin;
