// The page's state: plain data shared by the modules, and what tests read as window.gatewayDemo
// (main.js adds the live accessors: level(), statsNow(), pc, prepared …).

export const demo = {
  state: "idle", // idle | connecting | connected | failed | closed
  sessionId: null,
  sessionUrl: null,
  offerSdp: null,
  answerSdp: null,
  answerFmtp: null, // the gateway's Opus fmtp, as Chromium parsed it
  error: null, // {title, message, code, status}
  stats: null, // latest summarize() snapshot
  history: [],
  serverState: null, // last GET /v1/sessions/{id}
  voices: null,
  timing: {
    clickedAt: null, // performance.now() of the Connect click
    offerPostedAt: null,
    answerAt: null,
    connectedAt: null,
    firstPacketAt: null, // arrival of the first RTP packet (from inbound-rtp stats, see monitor.js)
    latestPacketAt: null, // arrival of the latest packet getStats counted then (an upper bound)
    firstPacketSeenAt: null, // when getStats first showed it
    firstPacketMs: null, // firstPacketAt − clickedAt
    firstPacketCount: null, // packets already counted when first seen (1 = exact)
  },
  candidates: { sent: 0, skipped: 0, patches: 0, patchErrors: [] },
  lastSpeak: null, // the latest Speak click: see speech.js
  speeches: [], // the last few Speak clicks, oldest first (lastSpeak is the last)
  lastInterrupt: null, // {clickedAt, respondedAt, silentAt, ms, wasAudible, interrupted, …}
  http: null, // the HTTP stream card's latest play (http-ui.js sets it)
  ogg: null, // the <audio> element on the Ogg URL (ogg.js sets it)
  talk: null, // the Talk card (talk-state.js; main.js sets it)
  ready: false,
};
