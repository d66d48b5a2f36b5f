// The remote audio: played through the <audio> element (Chromium renders a remote WebRTC stream
// only when a media element plays it) and tapped by two AnalyserNodes — a short one for level
// and silence, a long FFT for the dominant frequency — and by an AudioWorklet onset detector
// (onset-worklet.js: the first sample at or above a threshold, dated on the audio clock and
// mapped by getOutputTimestamp() to when it reaches the output); plus watch(), which polls a
// level condition every 2 ms.

import { peakFrequency, rmsOf } from "./analysis.js";
import { clearError, showError, ui } from "./ui.js";

export const SILENT_RMS = 0.01; // −40 dBFS: speech has stopped
export const AUDIBLE_RMS = 0.05; // −26 dBFS: speech has started
export const SILENCE_HOLD_MS = 40; // silence must last this long to count as stopped
export const ONSET_PEAK = 0.02; // |sample| ≥ −34 dBFS: the first audible sample (silence decodes to 0)
const WATCH_LIMIT_MS = 10_000;

export const audio = {
  ctx: null,
  freq: null, // large FFT for the dominant frequency
  levelNode: null, // short window (256 samples) for level / onset / silence
  source: null,
  stream: null,
  timeBuf: null,
  freqBuf: null,
  lastAudibleAt: -Infinity, // performance.now() of the last rms() above SILENT_RMS
  onsetNode: null, // the AudioWorklet detector, once its module has loaded
  onsetReady: null, // resolves once it has loaded (and tapped the stream, if there is one)
  onsetTapped: null, // the source node connected to it
  onsetWaiters: new Map(), // id -> resolve
  nextOnsetId: 1,

  /**
   * Create (or resume) the AudioContext, and tap the remote stream if it is already there.
   * Autoplay: allowed once the user has clicked on the page (Connect). Called after the offer
   * and answer have been exchanged, because the first AudioContext of a browser can take
   * ≈90 ms to open the audio device, and that must not delay the connection.
   */
  prepare() {
    if (!this.ctx) {
      this.ctx = new AudioContext({ latencyHint: "interactive" });
      this.freq = new AnalyserNode(this.ctx, { fftSize: 32768, smoothingTimeConstant: 0 });
      this.levelNode = new AnalyserNode(this.ctx, { fftSize: 256, smoothingTimeConstant: 0 });
      // Analysers only listen; a muted sink keeps them pulled by the graph.
      const sink = new GainNode(this.ctx, { gain: 0 });
      this.freq.connect(sink);
      this.levelNode.connect(sink);
      sink.connect(this.ctx.destination);
      this.timeBuf = new Float32Array(this.levelNode.fftSize);
      this.freqBuf = new Float32Array(this.freq.frequencyBinCount);
      const ctx = this.ctx;
      this.onsetReady = ctx.audioWorklet
        .addModule(new URL("./onset-worklet.js", import.meta.url))
        .then(() => {
          if (this.ctx !== ctx) return;
          this.onsetNode = new AudioWorkletNode(ctx, "onset-detector");
          this.onsetNode.port.onmessage = ({ data }) => this.onOnsetMessage(data);
          this.onsetNode.connect(sink);
          this.tap();
        })
        .catch(() => {}); // no worklet: onset() falls back to the level analyser
    }
    if (this.ctx.state !== "running") this.ctx.resume().catch(() => {});
    this.tap();
  },

  /** Play the remote stream. The <audio> element is what makes Chromium render it at all. */
  attach(stream) {
    this.stream = stream;
    ui.audio.srcObject = stream;
    ui.audio.play().catch((err) => {
      // Autoplay refused (no user gesture reached this page): the next click anywhere starts it.
      showError("Audio blocked", `the browser would not start playback (${err.message}); click anywhere on the page to hear it`);
      document.addEventListener(
        "click",
        () => {
          ui.audio.play().then(clearError, () => {});
          this.ctx?.resume();
        },
        { once: true },
      );
    });
    this.tap();
  },

  tap() {
    if (!this.ctx || !this.stream) return;
    if (this.source?.mediaStream !== this.stream) {
      if (this.source) this.source.disconnect();
      this.source = this.ctx.createMediaStreamSource(this.stream);
      this.source.connect(this.freq);
      this.source.connect(this.levelNode);
    }
    if (this.onsetNode && this.onsetTapped !== this.source) {
      this.source.connect(this.onsetNode);
      this.onsetTapped = this.source;
    }
  },

  /** Seconds between the graph rendering a sample and the output playing it. */
  outputLatency() {
    return this.ctx ? (this.ctx.baseLatency || 0) + (this.ctx.outputLatency || 0) : 0;
  },

  /** performance.now() at which the sample at `frame` of the audio clock reaches the output. */
  outputTime(frame) {
    const ctx = this.ctx;
    const seconds = frame / ctx.sampleRate;
    const ts = ctx.getOutputTimestamp?.();
    if (ts && ts.performanceTime > 0) return ts.performanceTime + (seconds - ts.contextTime) * 1000;
    // no output timestamp yet: from the render clock, plus the output's latency
    return performance.now() - (ctx.currentTime - seconds - this.outputLatency()) * 1000;
  },

  onOnsetMessage(data) {
    if (data.onset === undefined) return;
    const resolve = this.onsetWaiters.get(data.onset);
    if (!resolve) return;
    this.onsetWaiters.delete(data.onset);
    const at = this.outputTime(data.frame);
    resolve({ at, renderedAt: at - this.outputLatency() * 1000, source: "worklet" });
  },

  /**
   * The next onset from now on: resolves {at, renderedAt, source} — `at` the performance.now()
   * at which the first sample at or above ONSET_PEAK reaches the output (audible), `renderedAt`
   * when the graph rendered it — or null when `limitMs` runs out or `signal` aborts. Without the
   * worklet, the level analyser's watch() (−26 dBFS RMS, dated by a main-thread look).
   */
  onset({ limitMs = WATCH_LIMIT_MS, signal = null } = {}) {
    if (!this.onsetNode || this.ctx?.state !== "running") {
      return watch(() => this.rms() > AUDIBLE_RMS, { limitMs, signal }).then((at) =>
        at === null ? null : { at, renderedAt: at, source: "analyser" },
      );
    }
    const id = this.nextOnsetId++;
    const node = this.onsetNode;
    return new Promise((resolve) => {
      const done = (value) => {
        clearTimeout(timer);
        if (this.onsetWaiters.delete(id)) node.port.postMessage({ disarm: id });
        resolve(value);
      };
      const timer = setTimeout(() => done(null), limitMs);
      signal?.addEventListener("abort", () => done(null), { once: true });
      this.onsetWaiters.set(id, (value) => done(value));
      node.port.postMessage({ arm: id, threshold: ONSET_PEAK });
    });
  },

  detach() {
    if (this.source) this.source.disconnect();
    this.source = null;
    this.onsetTapped = null;
    this.stream = null;
    ui.audio.pause();
    ui.audio.srcObject = null;
  },

  /** RMS of the last 256 samples the graph rendered (0…1). */
  rms() {
    if (!this.levelNode) return 0;
    const rms = rmsOf(this.levelNode, this.timeBuf);
    if (rms > SILENT_RMS) this.lastAudibleAt = performance.now();
    return rms;
  },

  /** Whether anything was heard now or within the last `ms` (a pause between words is short). */
  audibleWithin(ms) {
    return this.rms() > SILENT_RMS || performance.now() - this.lastAudibleAt < ms;
  },

  /** Peak of the spectrum in Hz (parabolic interpolation on dB), or null when silent. */
  dominantFrequency() {
    if (!this.freq) return null;
    return peakFrequency(this.freq, this.freqBuf);
  },
};

/**
 * Check `test()` every 2 ms; resolve the performance.now() at which it became true and then
 * stayed true for `holdMs` (so a momentary render dropout is not taken for silence), or null when
 * `limitMs` runs out or `signal` aborts.
 */
export function watch(test, { holdMs = 0, limitMs = WATCH_LIMIT_MS, signal = null } = {}) {
  const started = performance.now();
  let since = null;
  return new Promise((resolve) => {
    const timer = setInterval(() => {
      const now = performance.now();
      if (signal?.aborted) {
        clearInterval(timer);
        resolve(null);
      } else if (test()) {
        since ??= now;
        if (now - since >= holdMs) {
          clearInterval(timer);
          resolve(since);
        }
      } else {
        since = null;
        if (now - started > limitMs) {
          clearInterval(timer);
          resolve(null);
        }
      }
    }, 2);
  });
}
