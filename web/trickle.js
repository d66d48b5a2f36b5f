// Trickle ICE for a session the Talk card makes (session.js keeps its own, tuned for the
// connect-time figure): the offer goes out at once with the candidates gathered so far, less
// those the gateway cannot use; later ones follow by PATCH, in order, once the session URL is known.

import { describe } from "./http.js";
import { patchCandidates, sdpFrag, usable } from "./whep.js";

export class Trickle {
  constructor() {
    this.url = null;
    this.ufrag = null;
    this.pwd = null;
    this.mid = null;
    this.pending = [];
    this.chain = Promise.resolve();
    this.ended = false;
    this.counts = { sent: 0, skipped: 0, patches: 0, errors: [] };
  }

  /** The local offer as it should be POSTed (unusable candidates dropped); notes its ICE credentials. */
  offer(local, mid) {
    const sdp = local
      .split("\r\n")
      .filter((line) => !line.startsWith("a=candidate:") || usable(line.slice(2)))
      .join("\r\n");
    this.ufrag = sdp.match(/^a=ice-ufrag:(.+)$/m)?.[1]?.trim() ?? null;
    this.pwd = sdp.match(/^a=ice-pwd:(.+)$/m)?.[1]?.trim() ?? null;
    this.mid = mid ?? sdp.match(/^a=mid:(.+)$/m)?.[1]?.trim() ?? null;
    this.inOffer = local;
    return sdp;
  }

  /** An icecandidate event's candidate (null: end of candidates). */
  add(candidate) {
    if (this.ended) return;
    if (candidate === null) {
      this.pending.push(null);
    } else if (!candidate.candidate || this.inOffer?.includes(candidate.candidate)) {
      return; // Chromium's empty end-of-generation marker, or already in the offer
    } else if (!usable(candidate.candidate)) {
      this.counts.skipped++;
      return;
    } else {
      this.pending.push(candidate);
    }
    this.flush();
  }

  /** The session exists: send what waited, and from now on as candidates come. */
  start(url) {
    this.url = url;
    this.flush();
  }

  flush() {
    if (!this.url || this.pending.length === 0) return;
    const batch = this.pending.splice(0);
    const fragment = sdpFrag(this, batch);
    this.chain = this.chain.then(async () => {
      if (this.ended) return;
      try {
        await patchCandidates(this.url, fragment);
        this.counts.patches++;
        this.counts.sent += batch.filter((c) => c !== null).length;
      } catch (err) {
        this.counts.errors.push(describe(err)); // not fatal: ICE may succeed without it
      }
    });
  }

  stop() {
    this.ended = true;
  }
}
