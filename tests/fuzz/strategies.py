"""Hypothesis strategies shared by the fuzz tests: SDP mutations, sdpfrags, JSON, bytes."""

from __future__ import annotations

import contextlib
import gc
import json
import re
from collections.abc import Iterator
from pathlib import Path

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from gateway.http.openai_speech import MAX_SPEED, MIN_SPEED, OPENAI_VOICES, RESPONSE_FORMATS

ROOT = Path(__file__).resolve().parents[2]
SDP_DIR = ROOT / "sdp"
SHARED_SDP_DIR = Path("/work/shared/sdp-samples")  # extra real offers, where present
MAX_SDP_CHARS = 16 * 1024  # libwebrtc's SDP fuzzer caps its inputs at 16 KiB


def _corpus() -> list[str]:
    files = sorted(SDP_DIR.glob("*.offer.sdp")) + sorted(SDP_DIR.glob("*.answer.sdp"))
    if SHARED_SDP_DIR.is_dir():
        files += sorted(SHARED_SDP_DIR.glob("*.sdp"))
    seen: dict[str, None] = {}
    for path in files:
        seen.setdefault(path.read_text(encoding="utf-8"), None)
    assert seen, f"no SDP corpus under {SDP_DIR}"
    return list(seen)


CORPUS = _corpus()
OFFERS = [text for text in CORPUS if "a=setup:actpass" in text]  # the offers proper

def note_event(name: str) -> None:
    """``hypothesis.event`` where there is a Hypothesis test (helpers run in plain tests too)."""
    if currently_in_test_context():
        event(name)


@contextlib.contextmanager
def automatic_gc_off() -> Iterator[None]:
    """No automatic collection inside: deeply nested JSON drives json.loads to the recursion
    limit, and a collection that starts there runs the gateway's gc callback
    (runtime/gc_policy.py) with no stack left; it raises RecursionError, which pytest turns
    into a failure of whatever test is running (test_fuzz_http.py::
    test_gc_callback_survives_a_collection_near_the_recursion_limit pins that bug down
    deterministically). The properties here are about the parsers, so they run with it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def weighted(usual: st.SearchStrategy, rare: st.SearchStrategy, odds: int = 3) -> st.SearchStrategy:
    """``usual`` ``odds`` times as often as ``rare`` (``one_of`` flattens nested choices, so
    repeating a branch does not weight it)."""
    return st.sampled_from([usual] * odds + [rare]).flatmap(lambda strategy: strategy)


# --- building blocks ---------------------------------------------------------------------------

#: Characters that break parsers: separators, every str.splitlines() boundary, NUL, a BOM, a
#: lone surrogate (JSON can carry one: "\ud800"), non-ASCII digits int() accepts, RTL marks.
NASTY_CHARS = (
    " \t:/;=,*-+.\r\n\x00\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff\ud800\udcff"
    "\u0661\u0967\uff11\u200f\u00e9\U0001f600"
)
nasty_char = st.sampled_from(NASTY_CHARS)
any_char = st.one_of(nasty_char, st.characters(codec="utf-8"), st.characters(max_codepoint=127))
small_text = st.text(any_char, max_size=24)

INTERESTING_INTS = [
    0, 1, 2, 9, 35, 63, 95, 96, 111, 127, 128, 255, 256, 300, 1023, 8000, 24000, 48000,
    65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64, -1, -111, -(2**31),
]
int_text = st.one_of(
    st.sampled_from(INTERESTING_INTS).map(str),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["+111", " 111", "111 ", "1_11", "0x6f", "111.0", "1e3", "", "-0",
                     "\u0661\u0661\u0661", "\uff11\uff11\uff11", "NaN", "inf"]),
    st.integers(min_value=4290, max_value=4310).map(lambda n: "1" * n),  # int()'s digit limit
)
TOKENS = [
    "opus/48000/2", "opus/48000", "OPUS/48000/2", "opus/48000/1", "opus/24000/2", "opus",
    "opus/", "/48000", "opus/48000/2/2", "PCMU/8000", "red/48000/2", "telephone-event/8000",
    "sha-256", "sha-1", "sha-384", "sha-512", "md5", "AB:4F:71", "actpass", "active", "passive",
    "holdconn", "ACTPASS", "*", "nack", "nack pli", "transport-cc", "goog-remb", "ccm fir",
    "minptime=10;useinbandfec=1", "minptime=x", "maxplaybackrate=;", "=;=;", ";", "111/111",
    "BUNDLE 0 1", "BUNDLE", "LS", "WMS", "WMS *", "udp", "UDP", "tcp", "typ", "host", "srflx",
    "relay", "raddr", "rport", "tcptype", "passive", "generation", "IN", "IP4", "IP6",
    "IN IP4 127.0.0.1", "IN IP6 ::1", "IN IP4", "0.0.0.0", "::1", "x.local", "9", "0",
    "UDP/TLS/RTP/SAVPF", "RTP/AVP", "UDP/DTLS/SCTP", "webrtc-datachannel", "trickle",
    "urn:ietf:params:rtp-hdrext:sdes:mid", "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time",
    "1/sendonly", "2/recvonly", "1/", "/", "cname:x", "msid:a b", "FID 1 2", "SIM",
]
token = st.one_of(st.sampled_from(TOKENS), int_text, small_text)
value = st.one_of(
    token,
    st.lists(token, min_size=2, max_size=6).flatmap(
        lambda parts: st.sampled_from([" ", "/", ":", ";", "="]).map(lambda sep: sep.join(parts))
    ),
    st.integers(min_value=1, max_value=MAX_SDP_CHARS).map(lambda n: "x" * n),  # huge values
)
ATTRIBUTES = [
    "candidate", "end-of-candidates", "extmap", "extmap-allow-mixed", "fingerprint",
    "ice-options", "ice-pwd", "ice-ufrag", "ice-lite", "max-message-size", "mid", "msid",
    "msid-semantic", "rtcp", "rtcp-mux", "rtcp-rsize", "setup", "sendrecv", "recvonly",
    "sendonly", "inactive", "rtpmap", "sctpmap", "sctp-port", "ssrc-group", "ssrc", "fmtp",
    "rtcp-fb", "group", "ptime", "maxptime", "rtcp-xr", "identity",
]
attribute_line = st.builds(
    lambda name, v, with_value: f"a={name}:{v}" if with_value else f"a={name}",
    st.one_of(st.sampled_from(ATTRIBUTES), small_text), value, st.booleans(),
)
other_line = st.one_of(
    st.builds(
        lambda kind, port, proto, fmts: f"m={kind} {port} {proto} {' '.join(fmts)}",
        st.sampled_from(["audio", "video", "application", "text", "Audio", "audio "]),
        int_text, st.sampled_from(["UDP/TLS/RTP/SAVPF", "RTP/AVP", "UDP/DTLS/SCTP", "x"]),
        st.lists(st.one_of(int_text, st.sampled_from(["webrtc-datachannel", "*"])), max_size=6),
    ),
    st.builds(lambda t, v: f"{t}={v}", st.sampled_from([*list("vostcbkrzuepi"), "x", ""]), value),
    small_text,
    st.just(""),
)
sdp_line = st.one_of(attribute_line, other_line)
line_ending = st.sampled_from(["\r\n", "\n", "\r", "\r\r\n", "\n\r", "", " \r\n", "\x85"])

_SPLIT = re.compile(r"([ :/;=,])")


def _audio_payload_types(lines: list[str]) -> list[str]:
    for line in lines:
        if line.startswith("m=audio "):
            return line.split()[3:]
    return []


@st.composite
def mutated_sdp(draw: st.DrawFn, seeds: list[str] = CORPUS, max_mutations: int = 8) -> str:
    """A corpus SDP after up to ``max_mutations`` line/token/character mutations, with mixed
    line endings, at most 16 KiB."""
    lines = draw(st.sampled_from(seeds)).splitlines()
    for _ in range(draw(st.integers(0, max_mutations))):
        op = draw(st.sampled_from([
            "delete", "duplicate", "swap", "move", "replace", "insert", "token", "rename_pt",
            "char", "bitflip", "truncate", "huge", "prefix",
        ]))
        n = len(lines)
        if n == 0:
            lines = [draw(sdp_line)]
            continue
        i = draw(st.integers(0, n - 1))
        j = draw(st.integers(0, n - 1))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(j, lines[i])
        elif op == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "move":
            lines.insert(j, lines.pop(i))
        elif op == "replace":
            lines[i] = draw(sdp_line)
        elif op == "insert":
            lines.insert(j, draw(sdp_line))
        elif op == "token":
            parts = _SPLIT.split(lines[i])
            k = draw(st.integers(0, len(parts) - 1))
            parts[k] = draw(token)
            lines[i] = "".join(parts)
        elif op == "rename_pt":  # a munged offer: one payload type renamed everywhere
            pts = _audio_payload_types(lines)
            if pts:
                old, new = draw(st.sampled_from(pts)), draw(int_text)
                lines = [
                    re.sub(rf"(?<=[: ]){re.escape(old)}(?=[ /]|$)", new, line)
                    if line.startswith(("m=audio ", "a=rtpmap:", "a=fmtp:", "a=rtcp-fb:"))
                    else line
                    for line in lines
                ]
        elif op == "char":
            line = lines[i]
            k = draw(st.integers(0, len(line)))
            how = draw(st.sampled_from(["replace", "insert", "delete"]))
            c = draw(any_char)
            if how == "replace":
                lines[i] = line[:k] + c + line[k + 1 :]
            elif how == "insert":
                lines[i] = line[:k] + c + line[k:]
            else:
                lines[i] = line[:k] + line[k + 1 :]
        elif op == "bitflip":
            raw = bytearray(lines[i].encode("utf-8", "surrogatepass"))
            if raw:
                k = draw(st.integers(0, len(raw) - 1))
                raw[k] ^= 1 << draw(st.integers(0, 7))
            lines[i] = bytes(raw).decode("utf-8", draw(st.sampled_from(
                ["replace", "surrogateescape", "ignore"])))
        elif op == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
            del lines[i + 1 :]
        elif op == "huge":
            lines[i] += draw(st.sampled_from(["x", "1", " ", ";a=b", "/2", ":", "\u00e9"])) * draw(
                st.integers(1, MAX_SDP_CHARS)
            )
        elif op == "prefix":
            lines[0] = draw(st.sampled_from([" ", "\ufeff", "\r\n", "\t", "  \n", "x"])) + lines[0]
    if draw(st.booleans()):
        text = "".join(line + "\r\n" for line in lines)
    else:
        text = "".join(line + draw(line_ending) for line in lines)
    return text[:MAX_SDP_CHARS]


sdp_text = st.one_of(
    mutated_sdp(),
    mutated_sdp(OFFERS, max_mutations=2),  # close to a real offer: reaches the deep checks
    mutated_sdp(OFFERS, max_mutations=1),
    st.text(any_char, max_size=256).map(lambda t: "v=0\r\n" + t),
    st.text(max_size=64),
)

# --- trickle sdpfrag ---------------------------------------------------------------------------

ip_text = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(["127.0.0.1", "::1", "0.0.0.0", "fe80::1%eth0", "abc.local", "256.1.1.1",
                     "1.2.3", "", "[::1]", "localhost"]),
    small_text,
)
candidate_fields = st.tuples(
    st.one_of(st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1,
                      max_size=10), small_text),  # foundation
    st.one_of(st.sampled_from(["1", "2"]), int_text),  # component
    st.one_of(st.sampled_from(["udp", "tcp", "UDP", "TCP", "tls", "sctp"]), small_text),
    st.one_of(int_text, st.just("2122260223")),  # priority
    ip_text,
    int_text,  # port
    st.sampled_from(["typ", "type", "typ typ", ""]),
    st.one_of(st.sampled_from(["host", "srflx", "prflx", "relay", "HOST"]), small_text),
    st.lists(
        st.tuples(
            st.sampled_from(["raddr", "rport", "tcptype", "generation", "ufrag", "network-id",
                             "network-cost", "x"]),
            st.one_of(int_text, ip_text, st.sampled_from(["active", "passive", "so"])),
        ),
        max_size=4,
    ),
)


def _candidate_line(fields: tuple, keep: int, sep: str) -> str:
    foundation, component, proto, priority, ip, port, typ, kind, extras = fields
    parts = [foundation, component, proto, priority, ip, port, typ, kind]
    parts += [item for pair in extras for item in pair]
    return "a=candidate:" + sep.join(parts[:keep])


candidate_line = st.builds(
    _candidate_line, candidate_fields, st.integers(0, 20), st.sampled_from([" ", "  ", "\t"])
)
good_candidate_line = st.builds(
    lambda f, c, proto, prio, ip, port, kind, extra: (
        f"a=candidate:{f} {c} {proto} {prio} {ip} {port} typ {kind}{extra}"
    ),
    st.integers(0, 2**32).map(str), st.sampled_from(["1", "2"]), st.sampled_from(["udp", "tcp"]),
    st.integers(0, 2**31).map(str), st.sampled_from(["127.0.0.1", "::1", "192.0.2.7", "x.local"]),
    st.integers(0, 65535).map(str), st.sampled_from(["host", "srflx", "prflx", "relay"]),
    st.sampled_from(["", " generation 0", " raddr 0.0.0.0 rport 0", " tcptype active",
                     " ufrag jJsd network-id 1", " raddr", " rport", " rport -1"]),
)
sdpfrag_line = st.one_of(
    good_candidate_line,
    candidate_line,
    st.builds(lambda v: f"a=ice-ufrag:{v}", small_text),
    st.builds(lambda v: f"a=ice-pwd:{v}", small_text),
    st.builds(lambda v: f"a=mid:{v}", st.one_of(st.sampled_from(["0", "1", "audio"]), small_text)),
    st.sampled_from(["a=end-of-candidates", " a=end-of-candidates ", "a=end-of-candidates:x",
                     "a=candidate:", "a=candidate", "a=ice-options:trickle", "m=audio 9 x 0",
                     ""]),
    sdp_line,
)
sdpfrag_text = st.one_of(
    st.lists(st.tuples(sdpfrag_line, line_ending), max_size=12).map(
        lambda pairs: "".join(line + end for line, end in pairs)
    ),
    st.text(any_char, max_size=200),
)

# --- JSON --------------------------------------------------------------------------------------

json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(), st.text(any_char, max_size=16),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def deep(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


#: JSON-ish bodies that trip json.loads itself (recursion, the int digit limit) or the decode.
hostile_json_text = st.one_of(
    st.integers(min_value=900, max_value=200_000).map(deep),
    st.integers(min_value=900, max_value=50_000).map(lambda d: '{"a":' * d + "1" + "}" * d),
    st.integers(min_value=4301, max_value=20_000).map(lambda n: "1" * n),
    st.integers(min_value=4301, max_value=20_000).map(lambda n: '{"text": ' + "9" * n + "}"),
    st.sampled_from(["NaN", "-Infinity", '{"a": NaN}', "", " ", "\ufeff{}", "{}{}", "{", "nul",
                     '{"a":1,"a":2}', '"\\ud800"', '{"text": "\\udc00"}']),
)


def encode_json(value: object, encoding: str = "utf-8") -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=True).encode(encoding, "surrogatepass")


# --- OpenAI audio.speech bodies (stream/openai_speech.py) ------------------------------------

VOICES = ("tone", "tone48k", "long")  # tests/conftest.py tone_voices()
MAX_CHARS = 200

_speech_valid = {
    "model": st.sampled_from(["tts-1", "gpt-4o-mini-tts", ""]),
    "input": st.text(min_size=1, max_size=30).filter(str.strip),
    "voice": st.one_of(st.sampled_from([*VOICES, *OPENAI_VOICES, "ALLOY"]),
                       st.sampled_from([*VOICES, "alloy"]).map(lambda v: {"id": v})),
    "response_format": st.sampled_from(RESPONSE_FORMATS),
    "speed": st.one_of(st.sampled_from([MIN_SPEED, MAX_SPEED, 1, 2]),
                       st.floats(MIN_SPEED, MAX_SPEED)),
    "instructions": st.one_of(st.none(), small_text),
    "stream_format": st.sampled_from(["audio", "sse"]),
    "pace": st.sampled_from(["asap", "live"]),
}
_speech_bad = {
    "model": json_value,
    "input": st.one_of(st.sampled_from(["", " ", "\u3000"]), json_value,
                       st.integers(MAX_CHARS - 1, MAX_CHARS + 1).map(lambda n: "a" * n)),
    "voice": st.one_of(st.sampled_from(["Tone", "nope", ""]), st.just({"id": "nope"}),
                       st.fixed_dictionaries({"id": json_value}), json_value),
    "response_format": st.one_of(st.sampled_from(["OPUS", "ogg", ""]), json_value),
    "speed": st.one_of(st.sampled_from([0.2499, 4.0001, 0, -1, True, "1.0", "fast"]),
                       st.floats(), st.integers(), json_value),
    "instructions": json_value,
    "stream_format": st.one_of(st.sampled_from(["SSE", "text"]), json_value),
    "pace": st.one_of(st.sampled_from(["slow", "ASAP"]), json_value),
}
_speech_fields = {  # three valid values for every invalid one
    name: weighted(valid, _speech_bad[name]) for name, valid in _speech_valid.items()
}
speech_near_valid = st.fixed_dictionaries(
    {"input": _speech_fields["input"]},
    optional={**{k: v for k, v in _speech_fields.items() if k != "input"},
              "extra": json_value},
)
speech_body = st.one_of(
    speech_near_valid,  # a mapping, as a decoded body
    speech_near_valid.map(encode_json),  # bytes, UTF-8
    st.tuples(  # json.loads(bytes) detects these
        speech_near_valid, st.sampled_from(["utf-16", "utf-32", "utf-16-le", "utf-8-sig"])
    ).map(lambda pair: encode_json(*pair)),
    speech_near_valid.map(lambda d: encode_json(d).decode("utf-8", "surrogatepass")),  # str
    json_value,
    json_value.map(encode_json),
    hostile_json_text,
    hostile_json_text.map(str.encode),
    st.binary(max_size=200),
    st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),  # a GET query
)
