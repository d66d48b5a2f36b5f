"""Which turn model a listener gets: ``load_turn_model(kind)`` -- none (silence), Smart Turn in
this process, or Smart Turn in its child process off the loop's core (the default).

Apart from turn_model.py (the model) and turn_process.py (its child process), so neither of
them imports the other's module at load time."""

from __future__ import annotations

import concurrent.futures
import logging

from gateway.listen.turn_model import SmartTurnModel, TurnModel, judges_executor
from gateway.listen.turn_process import TurnModelProcess

log = logging.getLogger(__name__)


def load_turn_model(kind: str, *, in_process: bool = False) -> TurnModel | None:
    """``smart-turn`` -> the model; ``silence`` -> None (no model: silence alone).

    By default the model runs in a child process off the loop's core (turn_process.py), started
    now on the judges' executor thread (so this returns at once and the first inference queues
    behind the start); ``in_process``: on that thread, in this process."""
    if kind == "silence":
        return None
    if kind == "smart-turn":
        if in_process:
            return SmartTurnModel()
        model = TurnModelProcess()
        judges_executor().submit(model.start).add_done_callback(_log_start)
        return model
    raise ValueError(f"unknown turn detector {kind!r}: use smart-turn or silence")


def _log_start(future: concurrent.futures.Future[None]) -> None:
    if (error := future.exception()) is not None:
        log.warning("the turn model did not start: %r", error)
