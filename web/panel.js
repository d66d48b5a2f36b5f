// The live receive-stats panel: the getStats figures, the codec lines, click → first packet,
// and the three last-minute plots.

import { audio } from "./audio.js";
import { Plot } from "./plot.js";
import { demo } from "./state.js";
import { $ } from "./ui.js";

const stat = {
  rtt: $("s-rtt"),
  jitter: $("s-jitter"),
  received: $("s-received"),
  lost: $("s-lost"),
  nack: $("s-nack"),
  concealed: $("s-concealed"),
  jb: $("s-jb"),
  level: $("s-level"),
  freq: $("s-freq"),
  first: $("s-first"),
  codec: $("s-codec"),
  fmtp: $("s-fmtp"),
  answerFmtp: $("s-answer-fmtp"),
};

const css = getComputedStyle(document.documentElement);
const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
const plots = {
  jb: new Plot($("plot-jb"), {
    series: [{ color: color("--accent", "#2457d6") }],
    floorMax: 50,
    format: (v) => `${v.toFixed(0)} ms`,
  }),
  loss: new Plot($("plot-loss"), {
    series: [{ color: color("--danger", "#c4332b") }, { color: color("--warn", "#b26b00") }],
    floorMax: 2,
    format: (v) => `${v.toFixed(1)} %`,
  }),
  level: new Plot($("plot-level"), {
    series: [{ color: color("--ok", "#1d8a4e") }],
    max: 1,
    format: (v) => v.toFixed(2),
  }),
};

export function clearPlots() {
  Object.values(plots).forEach((plot) => plot.clear());
}

const fmt = (v, digits = 0, unit = "") =>
  v === null || v === undefined || Number.isNaN(v) ? "–" : `${v.toFixed(digits)}${unit}`;

/** Show one summarize() snapshot, and add it to the plots. */
export function renderStats(s) {
  stat.rtt.textContent = fmt(s.rttMs, 1, " ms");
  stat.jitter.textContent = fmt(s.jitterMs, 1, " ms");
  stat.received.textContent = s.packetsReceived.toLocaleString();
  stat.lost.textContent = s.packetsLost.toLocaleString();
  stat.nack.textContent = s.nackCount === undefined ? "off" : s.nackCount.toLocaleString();
  stat.concealed.textContent = fmt(s.concealedPct, 2, " %");
  stat.jb.textContent = fmt(s.intervalJitterBufferMs ?? s.jitterBufferMs, 0, " ms");
  stat.level.textContent = fmt(s.audioLevel, 3);
  const f = audio.dominantFrequency();
  stat.freq.textContent = f && s.audioLevel > 0.01 ? `${f.toFixed(1)} Hz` : "–";
  if (s.codec) {
    stat.codec.textContent = `${s.codec.mimeType} · ${s.codec.clockRate} Hz RTP clock · payload type ${s.codec.payloadType}`;
    stat.fmtp.textContent = s.codec.sdpFmtpLine || "–";
  }

  plots.jb.push(s.intervalJitterBufferMs);
  plots.loss.push(s.intervalLossPct, s.intervalConcealedPct);
  plots.level.push(s.audioLevel);
}

export function showFirstPacket(ms) {
  stat.first.textContent = `${ms.toFixed(0)} ms`;
}

/**
 * The gateway's Opus fmtp as Chromium parsed it: pc.remoteDescription is Chromium's own
 * re-serialisation of the answer. (Codec stats' sdpFmtpLine shows the *receive* fmtp, which
 * Chromium takes from its own offer.)
 */
export function showAnswerFmtp(pc) {
  const sdp = pc.remoteDescription?.sdp ?? "";
  const pt = sdp.match(/^a=rtpmap:(\d+) opus\/48000/im)?.[1];
  const fmtp = pt ? sdp.match(new RegExp(`^a=fmtp:${pt} (.*)$`, "m"))?.[1]?.trim() : null;
  demo.answerFmtp = fmtp ?? null;
  stat.answerFmtp.textContent = fmtp ?? "–";
}
