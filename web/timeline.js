// Each turn's latency as a timeline on a <canvas>, one row per turn, from the end of the user's
// speech: the endpointing wait, ASR, the agent's first reply text, the first reply audio sent —
// the gateway's own figures (GET the session: duplex.turns[].latency_ms) — and a tick where
// the page itself first heard the reply. Before the gateway's figures arrive, the events' arrival
// times stand in (no endpointing: the speech_stopped event only comes once it is over).

export const SEGMENTS = [
  { key: "endpointing", label: "endpointing wait", color: ["--tl-endpoint", "#8a94a6"] },
  { key: "asr", label: "ASR", color: ["--tl-asr", "#2457d6"] },
  { key: "agent_first_text", label: "first reply text", color: ["--tl-agent", "#8e44ad"] },
  { key: "tts_first_audio", label: "first audio", color: ["--tl-tts", "#1d8a4e"] },
];
const HEARD_COLOR = ["--tl-heard", "#b26b00"];
const ROWS = 6; // the latest turns shown
const ROW_H = 20;
const AXIS_H = 16;
const LABEL_W = 30;
const TOTAL_W = 64;

/**
 * A turn's segments in ms from the end of speech: [{key, label, start, ms}], with `source`
 * "gateway" or "events", the total, and where the page heard it (null when unknown).
 */
export function segmentsOf(turn) {
  const lat = turn.latency;
  const c = turn.client;
  let values;
  let source;
  if (lat && Object.values(lat).some((v) => v !== null)) {
    values = SEGMENTS.map((s) => lat[s.key]);
    source = "gateway";
  } else {
    const gap = (a, b) => (a !== null && b !== null && b >= a ? b - a : null);
    values = [null, gap(c.stoppedAt, c.finalAt), gap(c.finalAt, c.replyAt), gap(c.replyAt, c.audibleAt)];
    source = "events";
  }
  let at = 0;
  const segments = [];
  SEGMENTS.forEach((s, i) => {
    const ms = values[i];
    if (ms === null || ms === undefined) return;
    segments.push({ key: s.key, label: s.label, start: at, ms });
    at += ms;
  });
  const total = lat?.end_of_speech_to_audio ?? (segments.length ? at : null);
  // the page heard it heardMs after the speech_stopped event, which came at the endpointing's end
  const heard = c.heardMs !== null && c.heardMs !== undefined
    ? (source === "gateway" ? (lat.endpointing ?? 0) : 0) + c.heardMs
    : null;
  return { segments, total, heard, source };
}

function niceStep(range) {
  const raw = range / 4;
  const power = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

/** Draw the latest turns that have any figure; returns how many rows were drawn. */
export function drawTimeline(canvas, turns) {
  const rows = turns
    .map((turn) => ({ turn, ...segmentsOf(turn) }))
    .filter((r) => r.segments.length)
    .slice(-ROWS);
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = AXIS_H + Math.max(rows.length, 1) * ROW_H + 6;
  canvas.style.height = `${height}px`;
  if (!width) return rows.length;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const style = getComputedStyle(document.documentElement);
  const css = ([name, fallback]) => style.getPropertyValue(name).trim() || fallback;
  const ink = css(["--muted", "#666"]);
  const grid = css(["--plot-grid", "#ddd"]);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  if (!rows.length) {
    ctx.fillStyle = ink;
    ctx.fillText("No turn yet: talk, then pause.", 4, height / 2);
    return 0;
  }

  const longest = Math.max(...rows.map((r) => Math.max(r.total ?? 0, r.heard ?? 0,
    r.segments.reduce((sum, s) => sum + s.ms, 0))), 1);
  const step = niceStep(longest);
  const top = Math.ceil(longest / step) * step;
  const x0 = LABEL_W;
  const plotW = Math.max(width - LABEL_W - TOTAL_W, 10);
  const x = (ms) => x0 + (plotW * ms) / top;

  // axis: gridlines and ms labels
  ctx.strokeStyle = grid;
  ctx.fillStyle = ink;
  ctx.lineWidth = 1;
  ctx.textAlign = "center";
  for (let ms = 0; ms <= top + 1e-9; ms += step) {
    const gx = Math.round(x(ms)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(gx, AXIS_H);
    ctx.lineTo(gx, height - 2);
    ctx.stroke();
    ctx.fillText(ms >= 1000 ? `${(ms / 1000).toFixed(ms % 1000 ? 1 : 0)} s` : `${ms}`, gx, AXIS_H / 2);
  }

  rows.forEach((row, i) => {
    const y = AXIS_H + i * ROW_H + 3;
    const h = ROW_H - 6;
    ctx.textAlign = "left";
    ctx.fillStyle = ink;
    ctx.fillText(`#${row.turn.turn}`, 2, y + h / 2);
    for (const s of row.segments) {
      const def = SEGMENTS.find((d) => d.key === s.key);
      ctx.fillStyle = css(def.color);
      ctx.globalAlpha = row.source === "gateway" ? 1 : 0.5;
      ctx.fillRect(x(s.start), y, Math.max(x(s.start + s.ms) - x(s.start), 1), h);
    }
    ctx.globalAlpha = 1;
    if (row.heard !== null) {
      const hx = Math.round(x(row.heard)) + 0.5;
      ctx.strokeStyle = css(HEARD_COLOR);
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(hx, y - 2);
      ctx.lineTo(hx, y + h + 2);
      ctx.stroke();
      ctx.lineWidth = 1;
    }
    ctx.fillStyle = ink;
    ctx.textAlign = "left";
    const label = row.total !== null ? `${Math.round(row.total)} ms` : "";
    ctx.fillText(row.source === "gateway" ? label : `${label}*`, x0 + plotW + 6, y + h / 2);
  });
  return rows.length;
}
