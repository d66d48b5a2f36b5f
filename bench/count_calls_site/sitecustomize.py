"""The call counter ``bench/count_calls.py`` puts into the gateway it starts (through
``PYTHONPATH``): in a process started as ``python -m gateway`` (``COUNT_CALLS_MODULE``, the
tests' own) with ``COUNT_CALLS_OUT`` set, it
wraps each method named in ``COUNT_CALLS_WATCH`` (JSON: ``[module, class, method, label]``)
once its module is imported, counting the calls and their ``time.thread_time``, and appends
the running totals to ``$COUNT_CALLS_OUT/calls-<pid>.jsonl`` every ``COUNT_CALLS_EVERY_S``.
Nested wrapped calls each count their own time (the outer one includes the inner). Anything
else that imports this file is left as it is."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any


def _is_target() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    module = os.environ.get("COUNT_CALLS_MODULE", "gateway").encode()
    return argv[1:3] == [b"-m", module] and bool(os.environ.get("COUNT_CALLS_OUT"))


def _start() -> None:
    out = os.environ["COUNT_CALLS_OUT"]
    watch: list[list[str]] = json.loads(os.environ.get("COUNT_CALLS_WATCH", "[]"))
    every = float(os.environ.get("COUNT_CALLS_EVERY_S", "2"))
    totals: dict[str, list[float]] = {}
    clock = time.thread_time

    def wrap(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                entry = totals.setdefault(label, [0, 0.0])
                entry[0] += 1
                entry[1] += clock() - start

        setattr(owner, name, counted)

    def patcher() -> None:
        left = {(m, c, f): label for m, c, f, label in watch}
        while left:
            time.sleep(0.2)
            for (module, cls, method), label in list(left.items()):
                loaded = sys.modules.get(module)
                owner = getattr(loaded, cls, None) if loaded is not None else None
                if owner is None or not hasattr(owner, method):
                    continue  # not imported (or still importing)
                wrap(owner, method, label)
                del left[(module, cls, method)]

    def dumper() -> None:
        path = os.path.join(out, f"calls-{os.getpid()}.jsonl")
        while True:
            time.sleep(every)
            row = {label: list(v) for label, v in totals.items()}
            row["_cpu"] = [0, time.process_time()]
            row["_mono"] = [0, time.monotonic()]
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")

    threading.Thread(target=patcher, name="count-calls-patcher", daemon=True).start()
    threading.Thread(target=dumper, name="count-calls-dumper", daemon=True).start()


if _is_target():
    _start()
