// The session resource, WHEP-style: POST the offer, PATCH trickled candidates
// (application/trickle-ice-sdpfrag), GET its state, DELETE it; and its speech sub-resource.

import { API, api } from "./http.js";

/** POST /v1/sessions with the SDP offer → {answer, url, id} (url: the session resource). */
export async function postOffer(sdp, signal) {
  const response = await api("v1/sessions", {
    method: "POST",
    headers: { "Content-Type": "application/sdp" },
    body: sdp,
    signal,
  });
  const answer = await response.text();
  const location = response.headers.get("Location");
  return { answer, url: new URL(location, API).href, id: location.split("/").pop() };
}

/**
 * Whether the gateway can use a candidate ("candidate:…" attribute text). It speaks UDP only
 * (aioice), and cannot resolve mDNS-hidden host names (…local) — it learns such an address from
 * our connectivity checks anyway, as a peer-reflexive candidate.
 */
export function usable(text) {
  const [, , transport, , address] = text.split(" ");
  return transport?.toLowerCase() === "udp" && !address?.endsWith(".local");
}

/** An SDP fragment for `candidates` (RTCIceCandidate, or null for end-of-candidates). */
export function sdpFrag({ ufrag, pwd, mid }, candidates) {
  const lines = [];
  if (ufrag) lines.push(`a=ice-ufrag:${ufrag}`);
  if (pwd) lines.push(`a=ice-pwd:${pwd}`);
  if (mid !== null && mid !== undefined) lines.push(`a=mid:${mid}`);
  for (const c of candidates) lines.push(c === null ? "a=end-of-candidates" : `a=${c.candidate}`);
  return lines.join("\r\n") + "\r\n";
}

export async function patchCandidates(url, fragment) {
  await api(url, {
    method: "PATCH",
    headers: { "Content-Type": "application/trickle-ice-sdpfrag" },
    body: fragment,
  });
}

/** DELETE the session; keepalive, so it also goes out while the page unloads. Never throws. */
export function deleteSession(url) {
  return fetch(url, { method: "DELETE", keepalive: true }).catch(() => {});
}

export async function getSession(url, signal) {
  return (await api(url, { signal })).json();
}

/** POST …/speech → the 202 body: {id, state, voice, location}. */
export async function postSpeech(sessionUrl, body) {
  const response = await api(`${sessionUrl}/speech`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return response.json();
}

/** DELETE …/speech → {interrupted: n}. */
export async function interruptSpeech(sessionUrl) {
  return (await api(`${sessionUrl}/speech`, { method: "DELETE" })).json();
}

/** GET an utterance (its `location`): state, first_timestamp (RTP, 48 kHz) once sent, … */
export async function getUtterance(location, signal) {
  return (await api(location, { signal })).json();
}
