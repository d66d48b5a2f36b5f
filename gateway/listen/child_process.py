"""A model in a spawned child process, answering one request at a time on a pipe: the lifecycle
Whisper's decoding processes (whisper_process.py) and the turn model's (turn_process.py) share.

Why one place: both spawn a fresh interpreter (``spawn``: no copy of the gateway's event loop,
sockets or threads), wait for the model to load with a timeout, turn every way the child can
fail (it never says ready, it exits, it dies mid-request, it sends an error) into the caller's
own error type, and stop it politely and then for sure. Written twice, those paths drifted.

The protocol, on a ``multiprocessing`` pipe: the child sends ``("ready", None)`` once its model
is loaded (or ``("error", why)`` and exits); then for each message it answers one
``(kind, value)`` tuple -- ``("ok", result)``, ``("error", why)`` or a kind of the caller's
own (Whisper's ``"superseded"``); ``None`` or the pipe's end stops it.

- child side: ``serve(conn, load)``, ``load`` returning the handler of one message (run in the
  child; what it raises is sent as the reply ``("error", why)``);
- parent side: ``ChildProcess``, blocking calls for one thread at a time (the caller's lock
  or pool makes it so).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

STOP_TIMEOUT_S = 2.0
EXIT_WAIT_S = 0.5  # a child whose pipe ended, to read its exit code

Reply = tuple[str, Any]
Handler = Callable[[Any], Reply]


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def serve(conn: Connection, load: Callable[[], Handler]) -> None:
    """The child's main loop: ``load`` the model, say ready, answer until told to stop or the
    parent is gone."""
    # The parent decides when we stop (a drain still needs its answers); Ctrl-C and a
    # supervisor's SIGTERM to the process group are the parent's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        handle = load()
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", describe(exc)))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        try:
            reply = handle(message)
        except Exception as exc:
            reply = ("error", describe(exc))
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class ChildProcess:
    """The parent's handle on one child (see the module's docstring). ``error`` is the type
    every failure is raised as; ``label`` names the child in its messages ("the whisper
    process did not start in 120 s")."""

    def __init__(self, name: str, error: type[Exception], *, start_timeout_s: float,
                 stop_timeout_s: float = STOP_TIMEOUT_S, label: str | None = None) -> None:
        self.name = name  # the process's name (ps, multiprocessing)
        self.label = label or name
        self.error = error
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._conn: Connection | None = None
        self.process: Any = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self._conn is not None and self.process is not None and self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return None if self.process is None else self.process.exitcode

    def start(self, target: Callable[..., None], *args: Any) -> None:
        """Spawn ``target(conn, *args)`` (a module-level function that ends in ``serve``) and
        wait, blocking, until it says ready; a child already running is killed first."""
        self.kill()
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=target, args=(child, *args), name=self.name,
                                    daemon=True)
        process.start()
        child.close()
        self._conn, self.process = parent, process
        self.starts += 1
        if not parent.poll(self.start_timeout_s):
            self.kill()
            raise self.error(f"the {self.label} process did not start in "
                             f"{self.start_timeout_s} s")
        try:
            kind, detail = parent.recv()
        except (EOFError, OSError):
            self.kill()
            raise self.error(f"the {self.label} process exited at start "
                             f"(code {process.exitcode})") from None
        if kind != "ready":
            self.kill()
            raise self.error(f"{self.label} failed to load: {detail}")

    def request(self, message: Any, timeout_s: float | None = None) -> Reply:
        """Send one message, wait for its reply (at most ``timeout_s``: then the child is
        taken as stuck and killed). A child that died on the way is killed and reported."""
        conn = self._conn
        if conn is None:
            raise self.error(f"the {self.label} process is not running")
        try:
            conn.send(message)
            if timeout_s is not None and not conn.poll(timeout_s):
                raise TimeoutError(f"no reply in {timeout_s} s")
            reply: Reply = conn.recv()
        except (EOFError, BrokenPipeError, OSError, TimeoutError) as exc:
            if not isinstance(exc, TimeoutError) and self.process is not None:
                self.process.join(EXIT_WAIT_S)  # the pipe's end: it is exiting, or gone
            alive = self.process is not None and self.process.is_alive()
            why = repr(exc) if alive else f"exit code {self.exitcode}"  # alive: stuck
            self.kill()
            raise self.error(f"the {self.label} process died ({why})") from None
        return reply

    def close(self) -> None:
        """Ask the child to stop; kill it if it does not within ``stop_timeout_s``."""
        if self._conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
        if self.process is not None:
            self.process.join(self.stop_timeout_s)
        self.kill()

    def kill(self) -> None:
        """Kill the child now (if alive) and close our end of the pipe."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(self.stop_timeout_s)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
