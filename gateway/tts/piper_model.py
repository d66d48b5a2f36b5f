"""Piper's VITS graph split at the HiFi-GAN decoder, so a sentence's audio can be decoded in pieces.

One run of the whole graph turns a sentence's phoneme ids into all of its samples: nothing comes
out before the last sample is made. The graph is two halves. The text encoder, the duration
predictor and the flow (``encoder`` here) are cheap and decide everything about the sentence: how
many frames each phoneme gets and the latent frames ``z`` (192 channels, one frame per
``hop_length`` = 256 samples). The HiFi-GAN decoder (``decoder``) turns frames into samples and
is most of the work; it is a stack of convolutions, so each output sample depends on a few frames
either side only (its receptive field: conv_pre's 3 frames, then the upsampling resblocks', about
10 frames each way in all for this voice). So a piece of frames ``[a, b)`` decoded together with
``CONTEXT_FRAMES`` frames either side gives the same samples as the whole sentence's decode, to
within float rounding (tests/test_piper_model.py; bench/piper_first_pcm.py checks the seam), and
the first 120 ms can be heard after the encoder and a decode of those frames alone.

The split is made in memory from the voice's own ONNX file (the ``onnx`` package, in the
``voice`` extra already for Piper's phoneme durations); the tensor names are found by the
decoder's node names (``/dec/...``) and the duration ``Ceil``, so ``split_model`` returns None
for a graph that does not look like Piper's, and the caller renders whole sentences as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# Frames decoded beyond a piece's edge on each side and thrown away: more than the decoder's
# receptive field (about 10 frames for this voice), so the piece's samples are the whole
# decode's (within float rounding).
CONTEXT_FRAMES = 12
GRAPH_INPUTS = ("input", "input_lengths", "scales")


@dataclass(frozen=True, slots=True)
class SplitGraph:
    """The voice's graph as two serialized ONNX models and the tensor joining them."""

    encoder: bytes  # phoneme ids, lengths, scales -> latent frames (and phoneme durations)
    decoder: bytes  # latent frames -> samples
    latent: str  # the tensor between them: [1, channels, frames]
    durations: str | None  # the duration predictor's Ceil: frames per phoneme id


def _find_tensors(graph: Any) -> tuple[str, str | None] | None:
    """(the decoder's input, the durations tensor) by node names, or None."""
    latent = None
    for node in graph.node:
        if node.name.startswith("/dec/"):
            latent = node.input[0]
            break
    ceil = [n.output[0] for n in graph.node if n.op_type == "Ceil"]
    if latent is None:
        return None
    return latent, ceil[0] if len(ceil) == 1 else None


def split_model(model_path: str) -> SplitGraph | None:
    """The voice's graph split at its decoder, or None (no ``onnx`` package, or a graph
    without a ``/dec/`` decoder fed by one tensor)."""
    try:
        import onnx
        import onnx.utils
    except ImportError:
        return None
    model = onnx.load(model_path)
    found = _find_tensors(model.graph)
    if found is None:
        return None
    latent, durations = found
    inputs = [i.name for i in model.graph.input]
    outputs = [o.name for o in model.graph.output][:1]
    extractor = onnx.utils.Extractor(model)
    encoder = extractor.extract_model(inputs, [latent] + ([durations] if durations else []))
    decoder = extractor.extract_model([latent], outputs)
    return SplitGraph(encoder.SerializeToString(), decoder.SerializeToString(), latent,
                      durations)


@dataclass(frozen=True, slots=True)
class Encoded:
    """One sentence through the encoder: its latent frames and each phoneme id's frames."""

    z: np.ndarray  # float32 [1, channels, frames]
    id_frames: np.ndarray | None  # int64 [ids], summing to ``frames``; None if not exported

    @property
    def frames(self) -> int:
        return int(self.z.shape[2])


class SplitModel:
    """The two halves as onnxruntime sessions: ``encode`` a sentence once, then ``decode``
    any range of its frames (several ranges join into the whole decode's samples)."""

    def __init__(self, graph: SplitGraph, make_session: Callable[[bytes], Any],
                 hop_length: int) -> None:
        self.graph = graph
        self.encoder = make_session(graph.encoder)
        self.decoder = make_session(graph.decoder)
        self.hop_length = hop_length
        self._decoder_input = self.decoder.get_inputs()[0].name

    def encode(self, phoneme_ids: list[int], scales: np.ndarray,
               sid: int | None = None) -> Encoded:
        ids = np.asarray(phoneme_ids, dtype=np.int64)[None, :]
        feed: dict[str, np.ndarray] = {
            "input": ids,
            "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
            "scales": scales.astype(np.float32),
        }
        if sid is not None:
            feed["sid"] = np.array([sid], dtype=np.int64)
        out = self.encoder.run(None, feed)
        z = np.ascontiguousarray(out[0], dtype=np.float32)
        id_frames = None
        if len(out) > 1:
            id_frames = np.asarray(out[1]).reshape(-1).astype(np.int64)
        return Encoded(z, id_frames)

    def decode(self, encoded: Encoded, start: int = 0, end: int | None = None,
               context: int = CONTEXT_FRAMES) -> np.ndarray:
        """Float samples (the decoder's tanh, in [-1, 1]) of frames ``[start, end)``, decoded
        with ``context`` frames either side that are dropped."""
        frames = encoded.frames
        end = frames if end is None else min(end, frames)
        start = max(0, min(start, end))
        if start == end:
            return np.zeros(0, dtype=np.float32)
        lo, hi = max(0, start - context), min(frames, end + context)
        z = np.ascontiguousarray(encoded.z[:, :, lo:hi])
        audio = self.decoder.run(None, {self._decoder_input: z})[0].reshape(-1)
        hop = self.hop_length
        return audio[(start - lo) * hop:(end - lo) * hop].astype(np.float32, copy=False)
