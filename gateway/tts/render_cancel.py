"""Stopping a model run that is already under way, from the event loop.

Cancelling the task that awaits a render does not stop the worker thread doing it: without
more, an abandoned utterance keeps a core busy until its current clause is rendered.
onnxruntime checks a ``RunOptions.terminate`` flag between graph nodes, so a run given a
``RunOptions`` ends within one node (milliseconds) of the flag being set. ``CancellableSession``
wraps the voice's ``InferenceSession`` (shared by every thread) and gives each run the
``RunOptions`` of the render the calling thread is doing (``RenderCancel.active``, a
thread-local); ``RenderCancel.cancel`` sets the flag from any thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_CURRENT = threading.local()


class RenderCancelled(Exception):
    """The render was cancelled (its reader went away, its session closed)."""


class RenderCancel:
    """One utterance's cancel switch: every model run it starts sees the same flag."""

    def __init__(self) -> None:
        import onnxruntime

        self.options = onnxruntime.RunOptions()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.options.terminate = True

    def check(self) -> None:
        if self.cancelled:
            raise RenderCancelled("the render was cancelled")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Model runs on this thread, inside the block, use this switch's options."""
        previous = getattr(_CURRENT, "cancel", None)
        _CURRENT.cancel = self
        try:
            yield
        finally:
            _CURRENT.cancel = previous


class CancellableSession:
    """An ``InferenceSession`` whose ``run`` honours the calling thread's ``RenderCancel``."""

    def __init__(self, session: Any) -> None:
        self._session = session

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        cancel: RenderCancel | None = getattr(_CURRENT, "cancel", None)
        if run_options is None and cancel is not None:
            cancel.check()
            try:
                return self._session.run(output_names, input_feed, cancel.options)
            except Exception:
                if cancel.cancelled:
                    raise RenderCancelled("the render was cancelled") from None
                raise
        return self._session.run(output_names, input_feed, run_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)
