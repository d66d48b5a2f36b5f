// The peer connection made ahead of the click (at page load and after each session), so Connect
// only has to POST its offer: that saves createOffer + setLocalDescription (15–30 ms) on the
// click → first packet path. Its candidates wait in `buffered` until a session takes it over.
// Nothing is sent anywhere before the click.

let warm = null;

function makePeer() {
  const pc = new RTCPeerConnection({ iceServers: [], bundlePolicy: "max-bundle" });
  const prepared = {
    pc,
    buffered: [],
    transceiver: pc.addTransceiver("audio", { direction: "recvonly" }),
    offered: false,
    gathered: false,
  };
  pc.onicecandidate = (event) => {
    prepared.buffered.push(event.candidate);
    if (event.candidate === null) prepared.gathered = true;
  };
  prepared.ready = pc.createOffer().then((offer) => pc.setLocalDescription(offer));
  prepared.ready.then(() => (prepared.offered = true), () => {});
  return prepared;
}

/** Make the next offer ahead, unless there is one already. */
export function prepareWarm() {
  if (warm || !("RTCPeerConnection" in window)) return;
  warm = makePeer();
}

/** The offer made ahead (or, failing that, a fresh one): {pc, transceiver, buffered, ready}. */
export function takeWarm() {
  const w = warm;
  warm = null;
  if (w && w.pc.signalingState === "have-local-offer") return w;
  if (w) w.pc.close();
  return makePeer();
}

/** {offer, gathered} of the offer made ahead, for tests and the bench; null when none. */
export function warmInfo() {
  return warm ? { offer: warm.offered, gathered: warm.gathered } : null;
}

export function closeWarm() {
  warm?.pc.close();
  warm = null;
}
