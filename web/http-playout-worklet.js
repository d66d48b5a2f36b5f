// The HTTP stream's playout, on the audio thread: an AudioWorkletProcessor ("http-playout") that
// plays decoded 20 ms PCM frames from a ring of at most `ringFrames` (8), posted by the main
// thread (http-stream.js), and reports back what the graph actually rendered.
//
// Messages in (each carries the play's `id`; anything for another id is stale and ignored):
//   {type: "start", id, frames}  a new play: forget the old one; play once `frames` are in
//   {type: "pcm", id, pcm}       one decoded frame (Float32Array at the context's rate)
//   {type: "end", id}            no more frames: an empty ring is then the end, not an underrun
//   {type: "stop", id}           drop everything now
// Messages out:
//   {type: "playing", id, frame, wall}       the first sample of the play was rendered
//   {type: "audible", id, frame, wall}       the first sample at or above AUDIBLE (|x| ≥ 0.05)
//   {type: "consumed", id, ring, played}     a frame was used up: `ring` frames are left
//   {type: "underrun", id, frame, wall, count}  the ring ran dry while frames were still due
//   {type: "drained", id, frame, wall, played, underruns, underrunSamples}   ended and played out
// `frame` is the context's sample frame (currentFrame + offset) of the event, `wall` Date.now()
// when the graph rendered it (the worklet scope has no performance.now(); the page maps it).

const AUDIBLE = 0.05; // −26 dBFS, the page's onset threshold for the WebRTC stream too

class HttpPlayout extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.capacity = options?.processorOptions?.ringFrames ?? 8;
    this.reset(0);
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  reset(id, startFrames = 1) {
    this.id = id;
    this.startLevel = Math.max(1, Math.min(startFrames, this.capacity)); // frames before the first sample
    this.ring = []; // Float32Array frames, oldest first
    this.offset = 0; // samples of ring[0] already played
    this.active = id !== 0; // a play is on (between start and drained/stop)
    this.playing = false; // its first sample was rendered
    this.heard = false;
    this.ended = false;
    this.dry = false; // inside an underrun
    this.played = 0; // frames used up
    this.underruns = 0;
    this.underrunSamples = 0;
    this.overflows = 0;
  }

  onMessage(m) {
    if (m.type === "start" || m.type === "stop") {
      this.reset(m.type === "start" ? m.id : 0, m.frames ?? 1);
      return;
    }
    if (m.id !== this.id || !this.active) return;
    if (m.type === "pcm") {
      if (this.ring.length >= this.capacity) {
        // the page keeps within the ring; should it not, the oldest frame goes (counted)
        this.ring.shift();
        this.offset = 0;
        this.overflows++;
      }
      this.ring.push(m.pcm);
    } else if (m.type === "end") {
      this.ended = true;
    }
  }

  /** Frames left in the ring, the one playing counted by what is left of it. */
  level() {
    if (this.ring.length === 0) return 0;
    return this.ring.length - this.offset / this.ring[0].length;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    const n = out.length;
    let i = 0;
    if (!this.playing && !this.ended && this.ring.length < this.startLevel) {
      out.fill(0); // not started yet: the start level is not decoded
      return true;
    }
    while (i < n && this.ring.length > 0) {
      const frame = this.ring[0];
      const take = Math.min(n - i, frame.length - this.offset);
      out.set(frame.subarray(this.offset, this.offset + take), i);
      if (!this.playing) {
        this.playing = true;
        this.dry = false;
        this.port.postMessage({ type: "playing", id: this.id, frame: currentFrame + i, wall: Date.now() });
      }
      if (!this.heard) {
        for (let k = 0; k < take; k++) {
          if (Math.abs(out[i + k]) >= AUDIBLE) {
            this.heard = true;
            this.port.postMessage({
              type: "audible", id: this.id, frame: currentFrame + i + k, wall: Date.now(),
            });
            break;
          }
        }
      }
      i += take;
      this.offset += take;
      if (this.offset >= frame.length) {
        this.ring.shift();
        this.offset = 0;
        this.played++;
        this.port.postMessage({ type: "consumed", id: this.id, ring: this.level(), played: this.played });
      }
      this.dry = false;
    }
    if (i < n) {
      out.fill(0, i);
      if (this.active) {
        if (this.ended) {
          this.port.postMessage({
            type: "drained", id: this.id, frame: currentFrame + i, wall: Date.now(),
            played: this.played, underruns: this.underruns, underrunSamples: this.underrunSamples,
            overflows: this.overflows,
          });
          this.active = false;
        } else if (this.playing) {
          if (!this.dry) {
            this.dry = true;
            this.underruns++;
            this.port.postMessage({
              type: "underrun", id: this.id, frame: currentFrame + i, wall: Date.now(),
              count: this.underruns,
            });
          }
          this.underrunSamples += n - i;
        }
      }
    }
    return true;
  }
}

registerProcessor("http-playout", HttpPlayout);
