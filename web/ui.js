// The page's elements, and the parts of it every module may change: the connection pill and
// buttons, the error banner, the "sound after" readout, the voice choice, the recent-speech list.

import { demo } from "./state.js";

export const $ = (id) => document.getElementById(id);

export const ui = {
  state: $("state"),
  connect: $("connect"),
  disconnect: $("disconnect"),
  error: $("error"),
  errorTitle: $("error-title"),
  errorMessage: $("error-message"),
  errorClose: $("error-close"),
  text: $("text"),
  voiceField: $("voice-field"),
  voice: $("voice"),
  voiceSingle: $("voice-single"),
  cutIn: $("cut-in"),
  speak: $("speak"),
  interrupt: $("interrupt"),
  latency: $("latency"),
  meter: $("meter-bar"),
  utterances: $("utterances"),
  audio: $("remote"),
  health: $("health"),
};

const LABELS = {
  idle: "Not connected",
  connecting: "Connecting…",
  connected: "Connected",
  failed: "Failed",
  closed: "Disconnected",
};

export function setState(state, label) {
  demo.state = state;
  ui.state.dataset.state = state;
  ui.state.textContent = label ?? LABELS[state];
  const live = state === "connecting" || state === "connected";
  ui.connect.hidden = live;
  ui.disconnect.hidden = !live;
  ui.speak.disabled = state !== "connected";
  ui.interrupt.disabled = state !== "connected";
}

export function showError(title, message, err = null) {
  demo.error = { title, message, code: err?.code ?? null, status: err?.status ?? null };
  ui.errorTitle.textContent = title;
  ui.errorMessage.textContent = message;
  ui.error.hidden = false;
}

export function clearError() {
  demo.error = null;
  ui.error.hidden = true;
}

export function showLatency(text) {
  ui.latency.textContent = text;
}

/** A <select> when there is a choice, a plain line when there is one voice. */
export function showVoices(preferred, voices) {
  if (voices.length > 1) {
    ui.voice.replaceChildren(
      ...voices.map((name) => new Option(name, name, name === preferred, name === preferred)),
    );
    ui.voiceField.hidden = false;
  } else if (voices.length === 1) {
    ui.voiceSingle.textContent = `Voice: ${voices[0]}`;
    ui.voiceSingle.hidden = false;
  }
}

/** The latest five utterances the gateway reports, newest first. */
export function renderUtterances(recent) {
  const items = recent.slice(-5).reverse();
  ui.utterances.replaceChildren(
    ...items.map((u) => {
      const li = document.createElement("li");
      const what = document.createElement("span");
      what.textContent = `${u.voice ?? ""} · ${u.id}`;
      const state = document.createElement("span");
      state.className = "state";
      state.dataset.state = u.state;
      state.textContent = u.state;
      li.append(what, state);
      return li;
    }),
  );
}
