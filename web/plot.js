// A tiny rolling line plot on a <canvas>: the last `capacity` samples, auto-scaled, crisp on HiDPI.

export class Plot {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{series: {color: string, label?: string}[], capacity?: number, min?: number,
   *          max?: number, floorMax?: number, format?: (v: number) => string}} options
   *   `max` fixes the scale; otherwise it grows to fit, never below `floorMax`.
   */
  constructor(canvas, options) {
    this.canvas = canvas;
    this.series = options.series;
    this.capacity = options.capacity ?? 60;
    this.min = options.min ?? 0;
    this.max = options.max ?? null;
    this.floorMax = options.floorMax ?? 1;
    this.format = options.format ?? ((v) => v.toFixed(1));
    this.data = this.series.map(() => []);
    new ResizeObserver(() => this.draw()).observe(canvas);
  }

  /** Append one sample per series (null leaves a gap). */
  push(...values) {
    values.forEach((v, i) => {
      const line = this.data[i];
      line.push(Number.isFinite(v) ? v : null);
      if (line.length > this.capacity) line.shift();
    });
    this.draw();
  }

  clear() {
    this.data = this.series.map(() => []);
    this.draw();
  }

  draw() {
    const { canvas } = this;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (!width || !height) return;
    if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
    if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    const style = getComputedStyle(document.documentElement);
    const gridColor = style.getPropertyValue("--plot-grid").trim() || "#ddd";
    const inkColor = style.getPropertyValue("--muted").trim() || "#666";

    let top = this.max;
    if (top === null) {
      top = this.floorMax;
      for (const line of this.data) for (const v of line) if (v !== null && v > top) top = v;
      top = niceCeil(top);
    }
    const pad = { left: 4, right: 4, top: 6, bottom: 4 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const x = (i) => pad.left + (plotW * i) / (this.capacity - 1);
    const y = (v) => pad.top + plotH - (plotH * (Math.min(v, top) - this.min)) / (top - this.min || 1);

    ctx.strokeStyle = gridColor;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = 0; k <= 2; k++) {
      const gy = Math.round(pad.top + (plotH * k) / 2) + 0.5;
      ctx.moveTo(pad.left, gy);
      ctx.lineTo(width - pad.right, gy);
    }
    ctx.stroke();

    ctx.fillStyle = inkColor;
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "top";
    ctx.fillText(this.format(top), pad.left + 3, pad.top + 1);

    this.data.forEach((line, s) => {
      const offset = this.capacity - line.length; // newest sample on the right edge
      ctx.strokeStyle = this.series[s].color;
      ctx.lineWidth = 1.75;
      ctx.lineJoin = "round";
      ctx.beginPath();
      let pen = false;
      line.forEach((v, i) => {
        if (v === null) { pen = false; return; }
        if (pen) ctx.lineTo(x(offset + i), y(v));
        else ctx.moveTo(x(offset + i), y(v));
        pen = true;
      });
      ctx.stroke();
    });

    const last = this.data.map((line) => line.at(-1)).filter((v) => v !== null && v !== undefined);
    if (last.length) {
      ctx.textAlign = "right";
      ctx.fillStyle = this.series[0].color;
      ctx.fillText(last.map((v) => this.format(v)).join(" / "), width - pad.right - 3, pad.top + 1);
      ctx.textAlign = "left";
    }
  }
}

function niceCeil(v) {
  if (v <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(v));
  for (const step of [1, 2, 2.5, 5, 10]) if (v <= step * power) return step * power;
  return 10 * power;
}
