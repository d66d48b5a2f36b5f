// Reading an AnalyserNode: the RMS of the samples it last rendered, and the spectrum's peak.
// Shared by the WebRTC stream's analysers (audio.js) and the HTTP modes' (http-audio.js).

/** RMS of the analyser's latest time-domain window (0…1); `buf` is a Float32Array(fftSize). */
export function rmsOf(analyser, buf) {
  analyser.getFloatTimeDomainData(buf);
  let sum = 0;
  for (const v of buf) sum += v * v;
  return Math.sqrt(sum / buf.length);
}

/**
 * Peak of the spectrum in Hz (parabolic interpolation on dB), or null when silent;
 * `bins` is a Float32Array(frequencyBinCount).
 */
export function peakFrequency(analyser, bins) {
  analyser.getFloatFrequencyData(bins);
  const hzPerBin = analyser.context.sampleRate / analyser.fftSize;
  let k = Math.max(1, Math.ceil(20 / hzPerBin));
  let best = k;
  for (; k < bins.length - 1; k++) if (bins[k] > bins[best]) best = k;
  if (!(bins[best] > -90)) return null;
  const [a, b, c] = [bins[best - 1], bins[best], bins[best + 1]];
  const denom = a - 2 * b + c;
  const offset = denom === 0 ? 0 : (0.5 * (a - c)) / denom;
  return (best + offset) * hzPerBin;
}
