"""Seeded, in-process network impairment for UDP datagrams (loss, bursts, delay, jitter, ...).

:class:`Impairment` decides, per datagram, when each copy of it is delivered (nothing: dropped;
two copies: duplicated). Loss is either independent (``loss_pct``) or bursty after the
Gilbert-Elliott model: a good and a bad state, ``P(good→bad) = p``, ``P(bad→good) = r``, loss
probability ``bad_loss`` in the bad state and ``good_loss`` in the good one. ``loss=5,burst=3``
derives it (``r = 1/3``, ``bad_loss = 1``, ``p`` so that 5 % are lost in runs of mean length 3);
``ge_p``/``ge_r``/``bad_loss``/``good_loss`` set it directly.

Each copy is delayed by ``delay_ms`` plus a uniform ``±jitter_ms`` (never below zero), so jitter
larger than the packet interval reorders datagrams, as Linux netem does; ``keep_order`` delivers
them in order instead (a queue's jitter). ``reorder_pct`` of the copies are held ``reorder_gap_ms``
longer so that later ones overtake them. Same config and seed: same decisions.

:func:`wrap_sendto` applies it to a ``sendto(data, addr)`` callable on an asyncio loop. Spec
strings (``parse_spec("loss=5,jitter=60,burst=3,seed=1")``) and command-line options
(``from_args(["--loss", "5", "--jitter", "60"])``) build a config.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImpairmentConfig:
    loss_pct: float = 0.0
    burst: float = 0.0  # mean loss-burst length in packets (>= 1); 0: independent loss
    ge_p: float | None = None  # explicit Gilbert-Elliott: P(good -> bad) per packet
    ge_r: float | None = None  # P(bad -> good) per packet
    bad_loss: float = 1.0  # loss probability in the bad state (explicit GE only)
    good_loss: float = 0.0  # loss probability in the good state (explicit GE only)
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    keep_order: bool = False
    reorder_pct: float = 0.0
    reorder_gap_ms: float = 30.0
    duplicate_pct: float = 0.0
    seed: int | None = None
    max_in_flight: int = 1024

    def __post_init__(self) -> None:
        for name in ("loss_pct", "reorder_pct", "duplicate_pct"):
            if not 0.0 <= getattr(self, name) <= 100.0:
                raise ValueError(f"{name} must be within 0..100")
        for name in ("bad_loss", "good_loss"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within 0..1")
        for name in ("delay_ms", "jitter_ms", "reorder_gap_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.burst and self.burst < 1.0:
            raise ValueError("burst (mean burst length) must be >= 1, or 0 for independent loss")
        if (self.ge_p is None) != (self.ge_r is None):
            raise ValueError("set both ge_p and ge_r, or neither")
        if self.ge_p is not None and self.ge_r is not None:
            if not (0.0 <= self.ge_p <= 1.0 and 0.0 < self.ge_r <= 1.0):
                raise ValueError("need 0 <= ge_p <= 1 and 0 < ge_r <= 1")
            if self.loss_pct or self.burst:
                raise ValueError("give either loss/burst or explicit ge_p/ge_r, not both")
        if self.burst and self.loss_pct >= 100.0:
            raise ValueError("bursty loss needs loss_pct < 100")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")

    def gilbert_elliott(self) -> tuple[float, float, float, float] | None:
        """``(p, r, bad_loss, good_loss)`` of the bursty-loss model; None: independent loss."""
        if self.ge_p is not None and self.ge_r is not None:
            return self.ge_p, self.ge_r, self.bad_loss, self.good_loss
        if self.burst and self.loss_pct:
            loss = self.loss_pct / 100.0
            r = 1.0 / self.burst
            return min(1.0, r * loss / (1.0 - loss)), r, 1.0, 0.0
        return None

    @property
    def expected_loss(self) -> float:
        """Long-run fraction of datagrams dropped (before any in-flight overflow)."""
        ge = self.gilbert_elliott()
        if ge is None:
            return self.loss_pct / 100.0
        p, r, bad_loss, good_loss = ge
        bad = p / (p + r)
        return bad * bad_loss + (1.0 - bad) * good_loss


@dataclass
class ImpairmentStats:
    offered: int = 0
    dropped: int = 0  # lost by the loss model
    duplicated: int = 0
    reordered: int = 0  # copies held back by reorder_pct
    overflow: int = 0  # copies dropped because max_in_flight were already pending
    sent: int = 0  # copies handed to the real sendto
    send_errors: int = 0


class Impairment:
    """The decision part: no I/O, no clock of its own."""

    def __init__(self, config: ImpairmentConfig) -> None:
        self.config = config
        self.stats = ImpairmentStats()
        self._rng = random.Random(config.seed)
        self._ge = config.gilbert_elliott()
        self._bad = False
        self._last_in_order = float("-inf")

    def decide(self, now: float) -> list[float]:
        """Delivery times (seconds, same clock as ``now``) for each copy; [] when dropped."""
        cfg, rng = self.config, self._rng
        self.stats.offered += 1
        if self._lost():
            self.stats.dropped += 1
            return []
        copies = 1
        if cfg.duplicate_pct and rng.random() * 100.0 < cfg.duplicate_pct:
            copies = 2
            self.stats.duplicated += 1
        times = []
        for _ in range(copies):
            delay = cfg.delay_ms
            if cfg.jitter_ms:
                delay = max(0.0, delay + rng.uniform(-cfg.jitter_ms, cfg.jitter_ms))
            at = now + delay / 1000.0
            if cfg.reorder_pct and rng.random() * 100.0 < cfg.reorder_pct:
                self.stats.reordered += 1
                at += cfg.reorder_gap_ms / 1000.0
            elif cfg.keep_order:
                at = max(at, self._last_in_order)
                self._last_in_order = at
            times.append(at)
        return times

    def _lost(self) -> bool:
        rng = self._rng
        if self._ge is None:
            return bool(self.config.loss_pct) and rng.random() * 100.0 < self.config.loss_pct
        p, r, bad_loss, good_loss = self._ge
        lost = rng.random() < (bad_loss if self._bad else good_loss)
        if self._bad:
            self._bad = rng.random() >= r
        else:
            self._bad = rng.random() < p
        return lost


Sendto = Callable[[bytes, Any], None]


class ImpairedSendto:
    """``sendto(data, addr)`` through an :class:`Impairment`, delayed with ``loop.call_later``.

    Copies due now go out synchronously. At most ``config.max_in_flight`` delayed copies are
    pending; more are dropped (``stats.overflow``). :meth:`close` cancels everything pending; after
    it, calls are ignored.
    """

    def __init__(
        self, sendto: Sendto, loop: asyncio.AbstractEventLoop, impairment: Impairment
    ) -> None:
        self._sendto = sendto
        self._loop = loop
        self.impairment = impairment
        self._pending: dict[int, asyncio.TimerHandle] = {}
        self._tokens = itertools.count()
        self._closed = False

    def __call__(self, data: bytes, addr: Any = None) -> None:
        if self._closed:
            return
        now = self._loop.time()
        for at in self.impairment.decide(now):
            if at <= now:
                self._send(data, addr)
            elif len(self._pending) >= self.impairment.config.max_in_flight:
                self.impairment.stats.overflow += 1
            else:
                token = next(self._tokens)
                self._pending[token] = self._loop.call_at(at, self._fire, token, data, addr)

    def _fire(self, token: int, data: bytes, addr: Any) -> None:
        self._pending.pop(token, None)
        self._send(data, addr)

    def _send(self, data: bytes, addr: Any) -> None:
        try:
            self._sendto(data, addr)
        except Exception:  # a closing transport must not break the event loop's timer
            self.impairment.stats.send_errors += 1
            log.debug("impaired sendto failed", exc_info=True)
        else:
            self.impairment.stats.sent += 1

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def stats(self) -> ImpairmentStats:
        return self.impairment.stats

    def close(self) -> None:
        self._closed = True
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()


def wrap_sendto(
    sendto: Sendto, loop: asyncio.AbstractEventLoop, config: ImpairmentConfig
) -> ImpairedSendto:
    """Wrap ``sendto(data, addr)`` so outgoing datagrams suffer ``config``'s impairments."""
    return ImpairedSendto(sendto, loop, Impairment(config))


# -- configuration from text ------------------------------------------------------------------

_SPEC_KEYS: dict[str, str] = {
    "loss": "loss_pct",
    "burst": "burst",
    "ge_p": "ge_p",
    "p": "ge_p",
    "ge_r": "ge_r",
    "r": "ge_r",
    "bad_loss": "bad_loss",
    "good_loss": "good_loss",
    "delay": "delay_ms",
    "jitter": "jitter_ms",
    "keep_order": "keep_order",
    "reorder": "reorder_pct",
    "reorder_gap": "reorder_gap_ms",
    "dup": "duplicate_pct",
    "duplicate": "duplicate_pct",
    "seed": "seed",
    "max_in_flight": "max_in_flight",
}
_INT_FIELDS = {"seed", "max_in_flight"}


def _convert(field: str, text: str) -> Any:
    if field == "keep_order":
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on", ""):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"keep_order: not a boolean: {text!r}")
    if field in _INT_FIELDS:
        return int(text)
    return float(text)


def parse_spec(spec: str) -> ImpairmentConfig:
    """``"loss=5,jitter=60,burst=3,seed=1"`` → config. Empty spec: no impairment.

    Keys: loss, burst, ge_p (p), ge_r (r), bad_loss, good_loss, delay, jitter, keep_order,
    reorder, reorder_gap, dup (duplicate), seed, max_in_flight. Percentages are in %, times in ms.
    """
    values: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, text = item.partition("=")
        field = _SPEC_KEYS.get(key.strip().lower().replace("-", "_"))
        if field is None:
            raise ValueError(f"unknown impairment key {key!r}")
        if not sep and field != "keep_order":
            raise ValueError(f"impairment key {key!r} needs a value")
        try:
            values[field] = _convert(field, text)
        except ValueError as exc:
            raise ValueError(f"bad value for {key!r}: {text!r}") from exc
    return ImpairmentConfig(**values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--loss``, ``--burst``, ``--delay``, ``--jitter``... (dest = config field names)."""
    group = parser.add_argument_group("network impairment")
    for flag, field in (
        ("--loss", "loss_pct"),
        ("--burst", "burst"),
        ("--ge-p", "ge_p"),
        ("--ge-r", "ge_r"),
        ("--bad-loss", "bad_loss"),
        ("--good-loss", "good_loss"),
        ("--delay", "delay_ms"),
        ("--jitter", "jitter_ms"),
        ("--reorder", "reorder_pct"),
        ("--reorder-gap", "reorder_gap_ms"),
        ("--dup", "duplicate_pct"),
    ):
        group.add_argument(flag, dest=field, type=float, default=None)
    group.add_argument("--seed", dest="seed", type=int, default=None)
    group.add_argument("--max-in-flight", dest="max_in_flight", type=int, default=None)
    group.add_argument("--keep-order", dest="keep_order", action="store_true", default=None)


def from_namespace(namespace: argparse.Namespace) -> ImpairmentConfig:
    """Config from parsed :func:`add_arguments` options (unset ones keep their defaults)."""
    names = {f.name for f in dataclasses.fields(ImpairmentConfig)}
    values = {k: v for k, v in vars(namespace).items() if k in names and v is not None}
    return ImpairmentConfig(**values)


def from_args(argv: Sequence[str]) -> ImpairmentConfig:
    """``["--loss", "5", "--jitter", "60"]`` → config; unknown options raise ``ValueError``."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_arguments(parser)
    try:
        namespace, rest = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        raise ValueError(str(exc)) from exc
    if rest:
        raise ValueError(f"unknown impairment options: {rest}")
    return from_namespace(namespace)
