"""Serial-number arithmetic (RFC 1982) for 16-bit RTP sequence numbers and 32-bit timestamps.

``seq_diff(a, b)`` is the signed distance from ``b`` to ``a`` in the range [-32768, 32767]:
``seq_diff(1, 65535) == 2``. ``seq_newer(a, b)`` is true when ``a`` comes after ``b``. Two numbers
exactly half the space apart are, as RFC 1982 leaves them, neither newer than the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SEQ_BITS = 16
SEQ_MOD = 1 << SEQ_BITS
SEQ_MASK = SEQ_MOD - 1
_SEQ_HALF = SEQ_MOD >> 1


def serial_diff(a: int, b: int, bits: int) -> int:
    """Signed distance ``a - b`` modulo ``2**bits``, in ``[-2**(bits-1), 2**(bits-1) - 1]``."""
    mod = 1 << bits
    half = mod >> 1
    return ((a - b + half) % mod) - half


def seq_diff(a: int, b: int) -> int:
    """Signed 16-bit distance ``a - b``: positive when ``a`` is newer than ``b``."""
    return ((a - b + _SEQ_HALF) & SEQ_MASK) - _SEQ_HALF


def seq_newer(a: int, b: int) -> bool:
    """True when sequence number ``a`` is strictly newer than ``b`` (wrap-aware)."""
    return seq_diff(a, b) > 0


def seq_add(a: int, n: int) -> int:
    """``a + n`` in 16-bit sequence space (``n`` may be negative)."""
    return (a + n) & SEQ_MASK


def ts_diff(a: int, b: int) -> int:
    """Signed 32-bit RTP timestamp distance ``a - b``."""
    return serial_diff(a, b, 32)


@dataclass
class Unwrapper:
    """Extends wrapping serial numbers to a monotonic-ish unbounded integer.

    Each value is placed at the signed distance from the last value seen, so the result is
    correct while consecutive inputs stay within half the space of each other. The first value
    unwraps to itself. ``Unwrapper(16)`` for sequence numbers, ``Unwrapper(32)`` for timestamps.
    """

    bits: int = SEQ_BITS
    _last: int | None = field(default=None, init=False, repr=False)

    def unwrap(self, value: int) -> int:
        # (``serial_diff`` written out: several calls per packet, per stream)
        mod = 1 << self.bits
        if not 0 <= value < mod:
            raise ValueError(f"value {value} out of range for {self.bits} bits")
        last = self._last
        if last is None:
            self._last = value
            return value
        half = mod >> 1
        result = last + (value - last % mod + half) % mod - half
        # Only move forward: an old (reordered) value must not drag the reference back.
        if result > last:
            self._last = result
        return result

    def peek(self, value: int) -> int:
        """What ``unwrap(value)`` would return, without updating state."""
        last = self._last
        if last is None:
            return value
        mod = 1 << self.bits
        half = mod >> 1
        return last + (value - last % mod + half) % mod - half

    def reset(self) -> None:
        self._last = None
