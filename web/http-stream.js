// One play of the HTTP stream: POST /v1/speech/stream → fetch()'s ReadableStream → FrameParser
// (frames.js) → a frame jitter buffer → WebCodecs AudioDecoder → the playout worklet's PCM ring.
//
// The two buffers (as in the gateway's own receive path, gateway/receive/receive_config.py):
// - the jitter buffer holds encoded frames: playback starts once it has `startFrames` (2–5) of
//   them, or the stream ended with fewer. It holds at most JITTER_FRAMES (5); while it is full
//   the reader takes no more records and no more bytes (TCP holds the rest: backpressure).
// - the PCM ring, in the worklet, holds at most RING_FRAMES (8) decoded frames, counting those
//   inside the decoder: a frame leaves the jitter buffer for the decoder only when the worklet
//   has used one up. The worklet starts playing once it holds `startFrames` decoded frames (or
//   the stream ended): the start level is PCM ready to play, so a decoder output that comes a
//   frame late does not make an underrun of the first frames (it did, 1 play in 6 on a loaded
//   2-vCPU VM: playback began on the first decoded frame). The worklet reports an underrun when
//   the ring runs dry before the end.
//
// What it measures goes into `stats` (window.gatewayDemo.http, see http-ui.js); times are
// performance.now() ms, "…Ms" fields are from the click.

import { AUDIBLE_RMS, watch } from "./audio.js";
import { FrameParser, MEDIA_TYPE, MalformedStream } from "./frames.js";
import { api } from "./http.js";
import { CONTEXT_RATE, RING_FRAMES, graph, wallToPerf } from "./http-audio.js";

export const JITTER_FRAMES = 5;
const RTP_RATE = 48_000; // the frames' timestamps count 48 kHz ticks
// The gateway's Opus encoder look-ahead (6.5 ms at 48 kHz), what its Ogg stream's OpusHead says
// (gateway/http/ogg_opus.py PRE_SKIP): the framed stream's header carries it from version 2;
// a version 1 stream (no pre-skip in its header) came from the same encoder.
const PRE_SKIP = 312;
const SOUND_LIMIT_MS = 120_000;

let nextId = 1;
const configs = new Map(); // "rate/channels" → Promise of the configuration this browser takes

/** An Opus identification header (RFC 7845 §5.1) for the decoder's `description`. */
export function opusHead({ channels, sampleRate, preSkip }) {
  const head = new Uint8Array(19);
  const view = new DataView(head.buffer);
  head.set(new TextEncoder().encode("OpusHead"));
  view.setUint8(8, 1); // version
  view.setUint8(9, channels);
  view.setUint16(10, preSkip, true);
  view.setUint32(12, sampleRate, true); // the encoder's input rate (informational)
  view.setInt16(16, 0, true); // output gain
  view.setUint8(18, 0); // channel mapping family 0: mono or stereo
  return head;
}

/**
 * The AudioDecoder configuration for a stream header. Chromium decodes Opus without a
 * `description` too (then nothing is trimmed); with the OpusHead it drops the pre-skip.
 */
export function decoderConfigFor({ sampleRate, channels, preSkip }) {
  const header = { sampleRate, channels, preSkip: preSkip ?? PRE_SKIP }; // version 1 does not say
  const key = `${header.sampleRate}/${header.channels}/${header.preSkip}`;
  if (!configs.has(key)) {
    const found = findConfig(header);
    found.catch(() => configs.delete(key)); // ask again next time
    configs.set(key, found);
  }
  return configs.get(key);
}

async function findConfig(header) {
  const base = { codec: "opus", sampleRate: header.sampleRate, numberOfChannels: header.channels };
  for (const config of [{ ...base, description: opusHead(header) }, base]) {
    try {
      if ((await AudioDecoder.isConfigSupported(config)).supported) return config;
    } catch {
      // a browser that rejects the description outright: try without
    }
  }
  throw new Error(`this browser cannot decode Opus at ${header.sampleRate} Hz with WebCodecs`);
}

export function httpStreamSupported() {
  if (typeof AudioDecoder === "undefined") {
    return "this browser has no WebCodecs AudioDecoder (it needs a secure context: https or localhost)";
  }
  return graph.error;
}

export class HttpStream {
  /** `request`: {text, voice?, pace}; `stats`: the record to fill (already reset). */
  constructor(request, stats, { startFrames = 2, clickedAt = performance.now() } = {}) {
    this.request = request;
    this.stats = stats;
    this.startFrames = Math.max(1, Math.min(JITTER_FRAMES, startFrames));
    this.clickedAt = clickedAt;
    this.id = nextId++;
    this.abort = new AbortController();
    this.parser = new FrameParser();
    this.jitter = []; // encoded frames waiting for the decoder
    this.started = false; // the jitter buffer reached its start level (or the stream ended)
    this.eos = false; // the end (or error) record was read
    this.decoding = 0; // frames in the decoder
    this.ring = 0; // decoded frames posted to the worklet and not yet used up
    this.flushing = false;
    this.endPosted = false;
    this.space = null; // resolves the reader's wait for room in the jitter buffer
    this.decoder = null;
    this.firstTimestamp = null;
    this.firstDecodeAt = null;
    this.stopped = false;
    this.failure = null; // what stopped it, when something did
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
    this.onMessage = (event) => this.onWorklet(event.data);
  }

  /**
   * Plays the stream to its end. Resolves "done", "stopped" (stop() was called) or "failed"
   * (it ended on an error record, after playing what came before it: stats.streamError);
   * throws when the request, the stream or the decoder failed.
   */
  async run() {
    const s = this.stats;
    graph.node.port.addEventListener("message", this.onMessage);
    graph.node.port.start();
    graph.node.port.postMessage({ type: "start", id: this.id, frames: this.startFrames });
    const onset = watch(() => s.playingAt !== null && graph.streamRms() > AUDIBLE_RMS, {
      limitMs: SOUND_LIMIT_MS,
      signal: this.abort.signal,
    });
    onset.then((at) => {
      if (at === null || this.stopped) return;
      s.onsetAt = at;
      s.onsetMs = at - this.clickedAt;
    });
    let state;
    try {
      s.state = "requesting";
      const response = await api("v1/speech/stream", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(this.request),
        signal: this.abort.signal,
      });
      s.responseAt = performance.now();
      s.responseMs = s.responseAt - this.clickedAt;
      const type = (response.headers.get("Content-Type") ?? "").split(";")[0].trim();
      if (type !== MEDIA_TYPE) throw new Error(`the gateway answered ${type || "no Content-Type"}, not ${MEDIA_TYPE}`);
      s.state = "buffering";
      await this.read(response.body.getReader());
      state = await this.finished;
    } catch (err) {
      if (this.failure) throw this.failure;
      if (this.stopped || err.name === "AbortError") return "stopped";
      this.stop("failed");
      throw err;
    } finally {
      graph.node.port.removeEventListener("message", this.onMessage);
      this.abort.abort(); // ends the onset watch; the response is over
    }
    if (this.failure) throw this.failure;
    return state;
  }

  async read(reader) {
    const s = this.stats;
    for (;;) {
      if (this.stopped) return;
      const record = this.parser.next();
      if (record === null) {
        if (this.eos) return;
        const { value, done } = await reader.read();
        if (this.stopped) return;
        if (done) {
          this.parser.close(); // throws: the stream stopped before its end record
          return;
        }
        s.firstChunkAt ??= performance.now();
        this.parser.push(value);
        s.bytes = this.parser.bytes;
        continue;
      }
      if (record.type === "header") {
        s.header = {
          sampleRate: record.sampleRate,
          frameMs: record.frameMs,
          channels: record.channels,
          preSkip: record.preSkip,
        };
        await this.configure(record);
      } else if (record.type === "frame") {
        s.firstFrameAt ??= performance.now();
        s.firstFrameMs ??= s.firstFrameAt - this.clickedAt;
        s.framesReceived++;
        await this.push(record);
      } else {
        if (record.type === "error") s.streamError = { code: record.code, message: record.message };
        this.endOfStream();
      }
    }
  }

  async configure(header) {
    const config = await decoderConfigFor(header);
    if (this.stopped) return;
    this.decoder = new AudioDecoder({
      output: (data) => this.onDecoded(data),
      error: (err) => this.fail(new Error(`the Opus decoder failed: ${err.message}`)),
    });
    this.decoder.configure(config);
    this.stats.decoder = {
      codec: config.codec,
      sampleRate: config.sampleRate,
      channels: config.numberOfChannels,
      description: "description" in config, // an OpusHead was given (pre-skip trimmed)
      outputRate: null,
    };
  }

  /** Into the jitter buffer; waits while it is full (the reader pauses: backpressure). */
  async push(frame) {
    this.jitter.push(frame);
    this.noteJitter();
    this.maybeStart();
    this.feed();
    while (this.jitter.length >= JITTER_FRAMES && !this.stopped) {
      await new Promise((resolve) => (this.space = resolve));
    }
  }

  noteJitter() {
    const s = this.stats;
    s.jitterFrames = this.jitter.length;
    s.jitterMax = Math.max(s.jitterMax, this.jitter.length);
    if (this.started && !this.eos && s.playingAt !== null) {
      s.jitterMin = Math.min(s.jitterMin ?? Infinity, this.jitter.length);
    }
  }

  maybeStart() {
    if (this.started || !(this.jitter.length >= this.startFrames || this.eos)) return;
    this.started = true;
    this.stats.startedAt = performance.now();
    this.stats.startedMs = this.stats.startedAt - this.clickedAt;
    this.stats.state = "playing";
  }

  /** Move frames from the jitter buffer to the decoder while the ring has room. */
  feed() {
    if (this.stopped || !this.decoder) return;
    while (this.started && this.jitter.length > 0 && this.ring + this.decoding < RING_FRAMES) {
      const frame = this.jitter.shift();
      this.firstTimestamp ??= frame.timestamp;
      const ticks = (frame.timestamp - this.firstTimestamp) >>> 0;
      this.decoding++;
      this.firstDecodeAt ??= performance.now();
      this.decoder.decode(new EncodedAudioChunk({
        type: "key", // every Opus packet decodes on its own
        timestamp: Math.round((ticks * 1e6) / RTP_RATE),
        duration: 20_000,
        data: frame.data,
      }));
    }
    this.noteJitter();
    if (this.space && this.jitter.length < JITTER_FRAMES) {
      this.space();
      this.space = null;
    }
    this.maybeEnd();
  }

  endOfStream() {
    this.eos = true;
    this.stats.endAt = performance.now();
    this.maybeStart();
    this.feed();
  }

  /** Every frame decoded and handed over: tell the worklet, which then plays the ring out. */
  maybeEnd() {
    if (!this.eos || this.jitter.length > 0 || this.endPosted) return;
    if (this.decoding > 0) {
      if (!this.flushing && this.decoder?.state === "configured") {
        this.flushing = true; // a decoder may hold its last outputs until flushed
        this.decoder.flush().catch(() => {});
      }
      return;
    }
    this.endPosted = true;
    this.stats.state = "draining";
    graph.node.port.postMessage({ type: "end", id: this.id });
  }

  onDecoded(data) {
    const s = this.stats;
    if (this.stopped) {
      data.close();
      return;
    }
    this.decoding--;
    if (s.framesDecoded === 0) s.decodeMs = performance.now() - this.firstDecodeAt;
    s.decoder.outputRate ??= data.sampleRate;
    const pcm = toContextRate(mono(data), data.sampleRate);
    data.close();
    s.framesDecoded++;
    this.ring++;
    s.ringFrames = this.ring;
    graph.node.port.postMessage({ type: "pcm", id: this.id, pcm }, [pcm.buffer]);
    this.feed();
  }

  onWorklet(m) {
    if (m.id !== this.id || this.stopped) return;
    const s = this.stats;
    switch (m.type) {
      case "playing":
        s.playingAt = wallToPerf(m.wall);
        break;
      case "audible":
        s.firstAudioAt = Math.max(wallToPerf(m.wall), this.clickedAt);
        s.firstAudioMs = s.firstAudioAt - this.clickedAt;
        break;
      case "consumed":
        this.ring--;
        s.framesPlayed = m.played;
        if (!this.eos) s.ringMin = Math.min(s.ringMin ?? Infinity, this.ring); // before the refill
        this.feed();
        s.ringFrames = this.ring;
        break;
      case "underrun":
        s.underruns = m.count;
        s.underrunAt.push(wallToPerf(m.wall));
        break;
      case "drained":
        s.underruns = m.underruns;
        s.underrunMs = (m.underrunSamples / CONTEXT_RATE) * 1000;
        s.framesPlayed = m.played;
        s.ringFrames = 0;
        s.drainedAt = wallToPerf(m.wall);
        this.finish(s.streamError ? "failed" : "done");
        break;
      default:
        break;
    }
  }

  finish(state) {
    this.stats.state = state;
    this.closeDecoder();
    this.resolveFinished(state);
  }

  fail(err) {
    if (this.stopped) return;
    this.failure = err;
    this.stop("failed");
  }

  /** Stop now: abort the request, drop both buffers, silence the worklet. */
  stop(state = "stopped") {
    if (this.stopped) return;
    this.stopped = true;
    this.stats.state = state;
    this.abort.abort();
    this.jitter = [];
    this.closeDecoder();
    graph.node.port.postMessage({ type: "stop", id: this.id });
    this.space?.();
    this.resolveFinished("stopped");
  }

  closeDecoder() {
    if (this.decoder && this.decoder.state !== "closed") this.decoder.close();
  }
}

/** Channel 0 (or the mean of two) as a Float32Array of its own. */
function mono(data) {
  const n = data.numberOfFrames;
  const pcm = new Float32Array(n);
  data.copyTo(pcm, { planeIndex: 0, format: "f32-planar" });
  if (data.numberOfChannels > 1) {
    const other = new Float32Array(n);
    data.copyTo(other, { planeIndex: 1, format: "f32-planar" });
    for (let i = 0; i < n; i++) pcm[i] = 0.5 * (pcm[i] + other[i]);
  }
  return pcm;
}

/** Linear resampling, for a decoder that does not hand out the context's rate (not Chromium). */
function toContextRate(pcm, rate) {
  if (rate === CONTEXT_RATE) return pcm;
  const n = Math.round((pcm.length * CONTEXT_RATE) / rate);
  const out = new Float32Array(n);
  const step = rate / CONTEXT_RATE;
  for (let i = 0; i < n; i++) {
    const x = i * step;
    const k = Math.floor(x);
    const a = pcm[Math.min(k, pcm.length - 1)];
    const b = pcm[Math.min(k + 1, pcm.length - 1)];
    out[i] = a + (b - a) * (x - k);
  }
  return out;
}

export { MalformedStream };
