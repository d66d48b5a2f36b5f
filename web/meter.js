// The level meter under the Speak button: ≈20 updates a second, as a compositor-only transform
// (no layout, no repaint of the page), and none while the value stands still.

import { audio } from "./audio.js";
import { ui } from "./ui.js";

const PERIOD_MS = 50;
let shown = -1;
let updatedAt = 0;

function frame(now) {
  requestAnimationFrame(frame);
  if (now - updatedAt < PERIOD_MS) return;
  updatedAt = now;
  const db = 20 * Math.log10(Math.max(audio.rms(), 1e-6)); // −60…0 dBFS → 0…1
  const fill = Math.round(Math.max(0, Math.min(1, (db + 60) / 60)) * 100) / 100;
  if (fill === shown) return;
  shown = fill;
  ui.meter.style.transform = `scaleX(${fill})`;
}

export function startMeter() {
  requestAnimationFrame(frame);
}
