// The onset detector of the demo page (audio.js): it sees every sample the audio graph renders
// from the remote stream and, for each armed request, reports the first sample whose magnitude
// reaches the request's threshold, by its frame on the AudioContext's clock (so the time is the
// sample's own, not that of a main-thread look at an AnalyserNode).

class OnsetDetector extends AudioWorkletProcessor {
  constructor() {
    super();
    this.armed = new Map(); // id -> threshold (0..1)
    this.port.onmessage = ({ data }) => {
      if (data.arm !== undefined) {
        this.armed.set(data.arm, data.threshold);
        this.port.postMessage({ armed: data.arm, frame: currentFrame });
      } else if (data.disarm !== undefined) {
        this.armed.delete(data.disarm);
      }
    };
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel && this.armed.size) {
      for (const [id, threshold] of this.armed) {
        for (let i = 0; i < channel.length; i++) {
          if (Math.abs(channel[i]) >= threshold) {
            this.armed.delete(id);
            this.port.postMessage({ onset: id, frame: currentFrame + i });
            break;
          }
        }
      }
    }
    return true;
  }
}

registerProcessor("onset-detector", OnsetDetector);
