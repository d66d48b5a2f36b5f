"""``sendmmsg(2)`` through cffi's ABI mode (``ffi.dlopen(None)``: libc, no compiler needed), so
one system call sends every datagram of a tick. ``BatchSocket.send`` returns how many were
sent; the caller sends the rest another way. ``available()`` is False off Linux, or if cffi or
the symbol is missing; the mux then sends each datagram with ``sendto``.
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Sequence
from typing import Any

try:
    import cffi
except ImportError:  # pragma: no cover - cffi comes with pylibsrtp
    cffi = None

_CDEF = """
struct iovec { void *iov_base; size_t iov_len; };
struct msghdr {
    void *msg_name; unsigned int msg_namelen; struct iovec *msg_iov; size_t msg_iovlen;
    void *msg_control; size_t msg_controllen; int msg_flags;
};
struct mmsghdr { struct msghdr msg_hdr; unsigned int msg_len; };
int sendmmsg(int sockfd, struct mmsghdr *msgvec, unsigned int vlen, int flags);
"""
MAX_BATCH = 512  # datagrams per call (Linux takes up to UIO_MAXIOV, 1024)
SLOT = 1536  # bytes per datagram slot: past any RTP packet of ours (MTU-sized)
_RETRY = (errno.EINTR,)
_SKIP = (errno.EMSGSIZE, errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH,
         errno.EACCES, errno.EPERM, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)

_ffi: Any = None
_lib: Any = None


def _load() -> bool:
    global _ffi, _lib
    if _lib is not None:
        return True
    if cffi is None or not sys.platform.startswith("linux"):
        return False
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        lib = ffi.dlopen(None)
        lib.sendmmsg  # noqa: B018 - resolves the symbol now
    except (OSError, AttributeError):
        return False
    if ffi.sizeof("struct mmsghdr") != 64:  # the x86_64/aarch64 layout this declares
        return False
    _ffi, _lib = ffi, lib
    return True


def available() -> bool:
    return _load()


def sockaddr(addr: tuple[str, int]) -> tuple[Any, int] | None:
    """A C ``sockaddr_in``/``sockaddr_in6`` for ``addr`` (None if it is not a numeric address)."""
    if not _load():
        return None
    raw = sockaddr_bytes(addr)
    if raw is None:
        return None
    return _ffi.new("char[]", raw), len(raw)


def sockaddr_bytes(addr: tuple[str, int]) -> bytes | None:
    """The bytes of Linux's ``sockaddr_in``/``sockaddr_in6`` for ``addr`` (None if it is not a
    numeric address)."""
    host, port = addr[0], addr[1]
    try:
        if ":" in host:
            raw = (socket.AF_INET6.to_bytes(2, sys.byteorder) + port.to_bytes(2, "big")
                   + bytes(4) + socket.inet_pton(socket.AF_INET6, host) + bytes(4))
        else:
            raw = (socket.AF_INET.to_bytes(2, sys.byteorder) + port.to_bytes(2, "big")
                   + socket.inet_pton(socket.AF_INET, host) + bytes(8))
    except (OSError, OverflowError):
        return None
    return raw


class BatchSocket:
    """One socket's preallocated ``mmsghdr``/``iovec`` arrays and a buffer of ``MAX_BATCH``
    slots of ``SLOT`` bytes, each ``iovec`` pointing at its slot once and for all: a datagram
    costs one copy into its slot and a length (and its address when the slot's changed)."""

    def __init__(self, fd: int) -> None:
        if not _load():
            raise OSError("sendmmsg is not available here")
        self.fd = fd
        self.calls = 0  # sendmmsg(2) calls made
        self.skipped = 0  # datagrams the kernel refused one by one (their destination)
        self._msgs = _ffi.new("struct mmsghdr[]", MAX_BATCH)
        self._iovs = _ffi.new("struct iovec[]", MAX_BATCH)
        self._arena = _ffi.new("char[]", MAX_BATCH * SLOT)
        self._buffer = _ffi.buffer(self._arena)
        self._iov_list = [self._iovs[i] for i in range(MAX_BATCH)]
        self._hdr_list = [self._msgs[i].msg_hdr for i in range(MAX_BATCH)]
        self._slot_names: list[Any] = [None] * MAX_BATCH
        for i in range(MAX_BATCH):
            self._iov_list[i].iov_base = self._arena + i * SLOT
            self._hdr_list[i].msg_iov = self._iovs + i
            self._hdr_list[i].msg_iovlen = 1

    def send(self, datagrams: Sequence[bytes], names: Sequence[tuple[Any, int]]) -> int:
        """Send ``datagrams[i]`` to ``names[i]`` (from ``sockaddr``, the same object for the
        same address); returns how many went, in order (fewer when the socket's buffer is full
        or a datagram is longer than a slot: the caller sends the rest another way)."""
        n = min(len(datagrams), MAX_BATCH)
        buffer, iovs, hdrs, slot_names = self._buffer, self._iov_list, self._hdr_list, \
            self._slot_names
        for i in range(n):
            data = datagrams[i]
            size = len(data)
            if size > SLOT:
                n = i
                break
            offset = i * SLOT
            buffer[offset : offset + size] = data
            iovs[i].iov_len = size
            name = names[i]
            if slot_names[i] is not name:
                slot_names[i] = name
                hdr = hdrs[i]
                hdr.msg_name = name[0]
                hdr.msg_namelen = name[1]
        sent = 0
        msgs = self._msgs
        while sent < n:
            rc = _lib.sendmmsg(self.fd, msgs + sent, n - sent, 0)
            self.calls += 1
            if rc >= 0:
                sent += rc
                continue
            err = _ffi.errno
            if err in _RETRY:
                continue
            if err in _SKIP:  # this datagram only (its destination): the rest still go
                sent += 1
                self.skipped += 1
                continue
            break  # the buffer is full, or the socket is unusable: the caller decides
        return sent
