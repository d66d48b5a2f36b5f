// The remote audio: played through the <audio> element (Chromium renders a remote WebRTC stream
// only when a media element plays it) and tapped by two AnalyserNodes — a short one for level,
// onset and silence, a long FFT for the dominant frequency — plus watch(), which polls a level
// condition every 2 ms.

import { peakFrequency, rmsOf } from "./analysis.js";
import { clearError, showError, ui } from "./ui.js";

export const SILENT_RMS = 0.01; // −40 dBFS: speech has stopped
export const AUDIBLE_RMS = 0.05; // −26 dBFS: speech has started
export const SILENCE_HOLD_MS = 40; // silence must last this long to count as stopped
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
    if (!this.ctx || !this.stream || this.source?.mediaStream === this.stream) return;
    if (this.source) this.source.disconnect();
    this.source = this.ctx.createMediaStreamSource(this.stream);
    this.source.connect(this.freq);
    this.source.connect(this.levelNode);
  },

  detach() {
    if (this.source) this.source.disconnect();
    this.source = null;
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
