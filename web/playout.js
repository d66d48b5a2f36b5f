// When Chromium plays a given RTP timestamp. RTCRtpReceiver.getSynchronizationSources() reports
// the RTP timestamp of the audio the receiver last delivered for playout (after its jitter
// buffer) and when (`timestamp`, wall-clock ms); sampled every few ms while someone is waiting,
// it gives the time each packet of the stream started to play.

const SAMPLE_MS = 4; // packets are 20 ms apart: each one is seen
const KEEP_MS = 10_000; // how far back a late question can still be answered
const RTP_TICKS_PER_MS = 48; // the Opus RTP clock is 48 kHz
const LIMIT_MS = 120_000;

/** Whether RTP timestamp `a` is at or after `b`, modulo 2^32 (serial-number comparison). */
export const rtpAtOrAfter = (a, b) => ((a - b) | 0) >= 0;

export class Playout {
  constructor(receiver) {
    this.receiver = receiver;
    this.samples = []; // {at: performance.now() time, rtp}: one per RTP timestamp, in order
    this.waiting = new Set(); // {ts, resolve, deadline}
    this.users = 0;
    this.timer = null;
    this.stopped = false;
  }

  /** Begin sampling (paired with release()); the history must start before the packet plays. */
  hold() {
    if (this.stopped) return;
    this.users++;
    if (this.timer === null) {
      this.timer = setInterval(() => this.sample(), SAMPLE_MS);
      this.sample();
    }
  }

  release() {
    this.users = Math.max(0, this.users - 1);
    if (this.users === 0 && this.waiting.size === 0) this.pause();
  }

  pause() {
    clearInterval(this.timer);
    this.timer = null;
  }

  /** The session is over: answer everyone with null. */
  stop() {
    this.stopped = true;
    this.pause();
    for (const w of this.waiting) w.resolve(null);
    this.waiting.clear();
  }

  sample() {
    const now = performance.now();
    const source = this.receiver.getSynchronizationSources?.()[0];
    if (source && Number.isFinite(source.rtpTimestamp)) {
      const rtp = source.rtpTimestamp >>> 0;
      const last = this.samples.at(-1);
      if (!last || last.rtp !== rtp) {
        // Chromium's `timestamp` is wall-clock ms (performance.timeOrigin + performance.now());
        // the spec allows a performance.now() clock too; failing both, the time of this look.
        let at = source.timestamp - performance.timeOrigin;
        if (!(Math.abs(now - at) < 1000)) at = Math.abs(now - source.timestamp) < 1000 ? source.timestamp : now;
        this.samples.push({ at: Math.min(at, now), rtp });
        while (this.samples.length > 1 && now - this.samples[0].at > KEEP_MS) this.samples.shift();
      }
    }
    for (const w of this.waiting) {
      const at = this.playedAt(w.ts);
      if (at !== null || now > w.deadline) {
        this.waiting.delete(w);
        w.resolve(at);
      }
    }
    if (this.users === 0 && this.waiting.size === 0) this.pause();
  }

  /**
   * When the receiver started playing the packet with RTP timestamp `ts` (or the first one after
   * it, if that one never came), from the samples so far; null if it has not yet.
   */
  playedAt(ts) {
    const i = this.samples.findIndex((s) => rtpAtOrAfter(s.rtp, ts));
    if (i < 0) return null;
    const s = this.samples[i];
    if (s.rtp === ts) return s.at;
    // Missed between two looks (or never sent): date `ts` back from the packet seen, at the
    // stream's pace, but not before the look that had not reached it.
    const back = ((s.rtp - ts) | 0) / RTP_TICKS_PER_MS;
    return i === 0 ? s.at - back : Math.max(this.samples[i - 1].at, s.at - back);
  }

  /** Resolves the performance.now() time the packet with RTP timestamp `ts` started to play. */
  when(ts, limitMs = LIMIT_MS) {
    if (this.stopped || !this.receiver.getSynchronizationSources) return Promise.resolve(null);
    const at = this.playedAt(ts);
    if (at !== null) return Promise.resolve(at);
    return new Promise((resolve) => {
      this.waiting.add({ ts, resolve, deadline: performance.now() + limitMs });
      if (this.timer === null) this.timer = setInterval(() => this.sample(), SAMPLE_MS);
    });
  }
}
