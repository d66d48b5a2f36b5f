"""Piper's encoder half alone: the floor under the voice's first PCM on this machine.

    python -m bench.piper_encoder [--rounds 8]

The gateway renders a clause's first PCM as the encoder half (text encoder ``enc_p``,
stochastic duration predictor ``dp``, the ``flow``: once per clause, over all of it) and then
a decode of the first piece's latent frames (docs/latency.md, "Piper's first word first"). The
decode is already cut to the first 120 ms; the encoder cannot be cut by range: ``enc_p`` and
``dp`` see every phoneme of the clause, and the flow's receptive field (4 coupling layers x
+-8 frames) spans most of a 3-word first clause. So the encoder's time is a floor under
text -> first PCM for this voice on these cores.

Measured in this process, on the first clauses the gateway cuts (3 words at most),
interleaved: the encoder session as the gateway builds it (2 intra-op threads, no spinning)
against 1 thread and the lower graph-optimisation levels (each a session of its own over the
same graph); then one profiled session split by the graph's top-level scopes (onnxruntime's
profiler: kernel time per run, its overhead included, so read the shares, not the sum).
Printed with the machine's load average; JSON in bench/results/piper_encoder.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.common import pct, write_results
from gateway.tts import piper_voice as pv

# First clauses as the gateway cuts them (FIRST_MAX_WORDS): bench.latency's openers, and more.
CLAUSES = ["Sure, I can help", "Hello there, how", "The weather today", "Please wait a",
           "Absolutely,", "I think we", "Let me look", "Your table is"]
SCALES = np.array([0.667, 1.0, 0.8], dtype=np.float32)  # the voice's noise, length, noise_w


def session(graph: bytes, threads: int = pv.INTRA_OP_THREADS, level: Any = None,
            profile: str | None = None) -> Any:
    """An encoder session as ``piper_voice._session`` builds it, with one option changed."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if level is not None:
        options.graph_optimization_level = level
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return onnxruntime.InferenceSession(graph, sess_options=options,
                                        providers=["CPUExecutionProvider"])


def feed(ids: list[int]) -> dict[str, np.ndarray]:
    array = np.asarray(ids, dtype=np.int64)[None, :]
    return {"input": array, "input_lengths": np.array([array.shape[1]], dtype=np.int64),
            "scales": SCALES}


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def scopes(path: str, runs: int) -> dict[str, float]:
    """Kernel µs per run by the node names' first scope (``/enc_p/...`` -> ``enc_p``)."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    total: collections.Counter[str] = collections.Counter()
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            total[name.split("/")[1] if name.startswith("/") else "other"] += event["dur"]
    return {scope: round(us / runs) for scope, us in total.most_common()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    import onnx
    import onnxruntime

    voice = pv.load_piper_voice()
    split = pv.load_split_model()
    if split is None:
        raise SystemExit("the split model needs the onnx package (the [voice] extra)")
    graph = split.graph.encoder
    inputs = [feed(voice.phonemes_to_ids(voice.phonemize(text)[0])) for text in CLAUSES]
    level = onnxruntime.GraphOptimizationLevel
    sessions = {
        f"gateway ({pv.INTRA_OP_THREADS} threads, all optimisations)": session(graph),
        "1 thread": session(graph, threads=1),
        "extended optimisations": session(graph, level=level.ORT_ENABLE_EXTENDED),
        "basic optimisations": session(graph, level=level.ORT_ENABLE_BASIC),
    }
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(args.rounds + 1):  # the first round warms every session up, not counted
        for name, s in sessions.items():
            times[name].extend(timed(lambda s=s, x=x: s.run(None, x)) for x in inputs)
    rows = {}
    for name, values in times.items():
        kept = values[len(inputs):]
        rows[name] = {"median_ms": round(statistics.median(kept), 1),
                      "p90_ms": pct(kept, 90), "min_ms": round(min(kept), 1), "n": len(kept)}
    with tempfile.TemporaryDirectory() as tmp:
        profiled = session(graph, profile=os.path.join(tmp, "encoder"))
        for x in inputs * 2:
            profiled.run(None, x)
        split_us = scopes(profiled.end_profiling(), 2 * len(inputs))
    nodes = len(onnx.load_from_string(graph).graph.node)
    load = os.getloadavg()[0]
    print(f"Piper encoder half ({nodes} nodes), first clauses x {args.rounds} rounds, "
          f"load average {load:.2f}")
    print(f"{'session':45} {'median':>7} {'p90':>7} {'min':>7}  (ms)")
    for name, row in rows.items():
        print(f"{name:45} {row['median_ms']:7.1f} {row['p90_ms']:7.1f} {row['min_ms']:7.1f}")
    print("profiled kernel time per run by scope (µs):",
          ", ".join(f"{k} {v}" for k, v in split_us.items() if v >= 100))
    path = write_results("piper_encoder", {"clauses": CLAUSES, "rounds": args.rounds,
                                           "nodes": nodes, "load_average": load,
                                           "sessions": rows, "profiled_scopes_us": split_us})
    print(f"written {path}")


if __name__ == "__main__":
    main()
