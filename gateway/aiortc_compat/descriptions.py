"""A negotiated peer connection's SDP descriptions kept packed (issue 28's memory lever).

aiortc keeps the offer and the answer it negotiated as parsed ``sdp.SessionDescription``
objects for the connection's whole life (``RTCPeerConnection.__currentLocalDescription``; the
offer it answered stays its ``__pendingRemoteDescription``: aiortc moves a remote description
to ``current`` only when it is an answer): every codec, feedback type, header extension,
candidate and fingerprint an object with a ``__dict__`` -- ≈ 10.7 KB of heap for aiortc's own
offer, ≈ 17.5 KB for Chromium 156's and ≈ 10.8 KB for the answer to it (tracemalloc), where
each text is 1.2-1.3 KB. Once the answer is set nothing reads them but a trickled candidate
(``addIceCandidate`` finds its m-line there and appends it) and a later negotiation.

``pack_descriptions`` replaces each with a ``PackedDescription``: that very object pickled and
zlib-compressed (≈ 1.5 KB), unpacked in place -- every field as it was -- the first time any
of its fields is read, so aiortc's code reads it as before. A pickle and not the SDP text: an
SDP re-serialised by aiortc is not always the one it parsed (it writes ``a=rtcp-mux`` only
beside an ``a=rtcp`` line: a Firefox-style offer comes back without it).
"""

from __future__ import annotations

import pickle
import zlib
from typing import Any

from aiortc import RTCPeerConnection, sdp

#: aiortc's names for the descriptions it keeps (name-mangled private attributes), local ones
#: first; ``__localDescription()`` / ``__remoteDescription()`` read the pending, then the current
LOCAL = ("_RTCPeerConnection__pendingLocalDescription",
         "_RTCPeerConnection__currentLocalDescription")
REMOTE = ("_RTCPeerConnection__pendingRemoteDescription",
          "_RTCPeerConnection__currentRemoteDescription")
DESCRIPTIONS = LOCAL + REMOTE
_PACKED = "_packed"


class PackedDescription(sdp.SessionDescription):
    """A ``SessionDescription`` kept as its compressed pickle until a field is read."""

    def __init__(self, description: sdp.SessionDescription) -> None:
        # (not SessionDescription.__init__: the fields are the pickle's, set when unpacked)
        self._packed = zlib.compress(pickle.dumps(description, pickle.HIGHEST_PROTOCOL))

    @property
    def packed(self) -> bool:
        return _PACKED in self.__dict__

    def __getattr__(self, name: str) -> Any:
        # Called only for a name not found: any field, until the pickle is unpacked here.
        packed = self.__dict__.pop(_PACKED, None)
        if packed is None:
            raise AttributeError(name)
        self.__dict__.update(vars(pickle.loads(zlib.decompress(packed))))  # (our own pickle)
        return getattr(self, name)


def pack_descriptions(pc: RTCPeerConnection) -> int:
    """Pack ``pc``'s negotiated descriptions (call once a negotiation is done, and again after
    anything that read them: a trickled candidate). Returns how many were packed now."""
    packed = 0
    for name in DESCRIPTIONS:
        description = getattr(pc, name, None)
        if description is None or (isinstance(description, PackedDescription)
                                   and description.packed):
            continue
        setattr(pc, name, PackedDescription(description))
        packed += 1
    return packed


def _descriptions_problems() -> list[str]:
    """check_internals' part: the attributes exist and aiortc's accessors read them."""
    problems: list[str] = []
    made = RTCPeerConnection.__init__.__code__.co_names
    readers = {"_RTCPeerConnection__localDescription": LOCAL,
               "_RTCPeerConnection__remoteDescription": REMOTE}
    for reader, names in readers.items():
        code = getattr(getattr(RTCPeerConnection, reader, None), "__code__", None)
        for name in names:
            if name not in made:
                problems.append(f"RTCPeerConnection.{name}")
            if code is None or name not in code.co_names:
                problems.append(f"RTCPeerConnection.{reader} no longer reads {name}")
    return problems
