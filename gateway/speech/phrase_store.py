"""The phrase cache on disk: one file per entry, written atomically, checked when read.

File ``<sha256(key)[:40]>.vgp``::

    magic      8 bytes   b"VGPHRS\\r\\n"
    version    u16 LE    FORMAT_VERSION
    header     u32 LE length + UTF-8 JSON {"tag", "voice", "text"} (the whole key)
    frames     u32 LE count n, then n x u16 LE packet lengths
    blob       the packets back to back
    crc32      u32 LE over everything above

A file is written to a temporary name in the same directory, flushed and fsync'ed, then
renamed over the final name (``os.replace``), so a reader never sees half a file.

Several processes may share the directory (``--workers``, or machines on a shared disk):
- a temporary name carries its writer (``.tmp-<host>-<pid>-…``); start-up removes only those
  no live writer will finish: this host's from dead pids, any older than ``ORPHAN_S``, and
  names of another form;
- each process remembers the modification time it last gave a file (written, or touched on a
  hit: ``os.utime`` with the nanosecond clock) or saw when it loaded it, and deletes a file
  only while that is still its time: once another process rewrote or used it, it is left to
  that process's own eviction (``kept_for_others`` counts these). So a file goes only when no
  process has used it since the deleting one last did (an LRU across the processes); one
  that a process still holds in memory and hits again is then written again (``rewrites``).

Anything that does not parse, fails its checksum or does not hash to its own name is corrupt:
ignored and counted. A file whose key was made under other encoder settings (or another format
version) is stale: ignored and counted. Methods other than ``load`` run on the cache's I/O
thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import struct
import sys
import tempfile
import time
import zlib
from array import array
from pathlib import Path
from typing import Any

from gateway.speech.phrase import FORMAT_VERSION, CachedPhrase, PhraseKey

log = logging.getLogger(__name__)

MAGIC = b"VGPHRS\r\n"
SUFFIX = ".vgp"
TMP_PREFIX = ".tmp-"
ORPHAN_S = 3600.0  # a temporary file this old is abandoned, whoever was writing it
HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def temp_prefix() -> str:
    """This process's temporary file names: ``.tmp-<host>-<pid>-``."""
    return f"{TMP_PREFIX}{HOST}-{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def abandoned(name: str, age_s: float) -> bool:
    """Whether no live writer will finish the temporary file ``name``."""
    parts = name[len(TMP_PREFIX):].split("-", 2)
    if len(parts) < 3 or not parts[1].isdigit():
        return True  # not a name this version writes
    if age_s > ORPHAN_S:
        return True
    if parts[0] != HOST:
        return False  # another machine's, recent: it may be writing it now
    return not _pid_alive(int(parts[1]))


def encode_entry(key: PhraseKey, phrase: CachedPhrase) -> bytes:
    header = json.dumps({"tag": key.tag, "voice": key.voice, "text": key.text},
                        ensure_ascii=False).encode()
    lengths = array("H", phrase.lengths)
    if sys.byteorder != "little":
        lengths.byteswap()
    body = b"".join((
        MAGIC, struct.pack("<HI", FORMAT_VERSION, len(header)), header,
        struct.pack("<I", len(lengths)), lengths.tobytes(), phrase.blob,
    ))
    return body + struct.pack("<I", zlib.crc32(body))


class CorruptEntry(ValueError):
    pass


class StaleEntry(ValueError):
    pass


def decode_entry(data: bytes) -> tuple[PhraseKey, CachedPhrase]:
    """Parse a file's bytes. Raises CorruptEntry or StaleEntry."""
    if len(data) < len(MAGIC) + 14 or not data.startswith(MAGIC):
        raise CorruptEntry("not a phrase cache file")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if zlib.crc32(body) != crc:
        raise CorruptEntry("checksum mismatch")
    pos = len(MAGIC)
    version, header_len = struct.unpack_from("<HI", body, pos)
    if version != FORMAT_VERSION:
        raise StaleEntry(f"format version {version}")
    pos += 6
    try:
        header = json.loads(body[pos : pos + header_len].decode())
        key = PhraseKey(str(header["tag"]), str(header["voice"]), str(header["text"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptEntry(f"bad header: {exc}") from None
    pos += header_len
    (count,) = struct.unpack_from("<I", body, pos)
    pos += 4
    lengths = array("H")
    lengths.frombytes(body[pos : pos + 2 * count])
    if sys.byteorder != "little":
        lengths.byteswap()
    pos += 2 * count
    try:
        return key, CachedPhrase(body[pos:], lengths)
    except ValueError as exc:
        raise CorruptEntry(str(exc)) from None


class PhraseStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.loaded = self.corrupt_files = self.stale_files = 0
        self.writes = self.write_errors = self.deletes = self.kept_for_others = 0
        self.rewrites = 0
        self._mtimes: dict[str, int] = {}  # digest -> st_mtime_ns this process gave or saw

    def path(self, key: PhraseKey) -> Path:
        return self.directory / f"{key.digest}{SUFFIX}"

    def load(self, tag: str) -> list[tuple[PhraseKey, CachedPhrase]]:
        """Every valid entry made under ``tag``, newest first. Removes temp files no live
        writer will finish (other processes may be writing theirs now)."""
        found: list[tuple[float, PhraseKey, CachedPhrase]] = []
        now = time.time()
        for path in self.directory.iterdir():
            if path.name.startswith(TMP_PREFIX):
                with contextlib.suppress(OSError):
                    if abandoned(path.name, now - path.stat().st_mtime):
                        path.unlink()  # a write that never finished
                continue
            if path.suffix != SUFFIX or not path.is_file():
                continue
            try:
                stat = path.stat()
                key, phrase = decode_entry(path.read_bytes())
                if key.digest != path.stem:
                    raise CorruptEntry("the key does not hash to the file name")
                if key.tag != tag:
                    raise StaleEntry(f"made under {key.tag}")
            except StaleEntry:
                self.stale_files += 1
                continue
            except (ValueError, OSError, struct.error) as exc:  # CorruptEntry included
                log.warning("phrase cache: ignoring %s: %s", path.name, exc)
                self.corrupt_files += 1
                continue
            found.append((stat.st_mtime, key, phrase))
            self._mtimes[key.digest] = stat.st_mtime_ns
        found.sort(key=lambda item: item[0], reverse=True)
        self.loaded = len(found)
        return [(key, phrase) for _, key, phrase in found]

    def write(self, key: PhraseKey, phrase: CachedPhrase) -> None:
        target = self.path(key)
        try:
            fd, tmp = tempfile.mkstemp(prefix=temp_prefix(), dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(encode_entry(key, phrase))
                    f.flush()
                    os.fsync(f.fileno())
                stamp = time.time_ns()
                os.utime(tmp, ns=(stamp, stamp))
                os.replace(tmp, target)
                self._mtimes[key.digest] = stamp
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            self.write_errors += 1
            log.warning("phrase cache: cannot write %s: %s", target.name, exc)
            return
        self.writes += 1

    def delete(self, key: PhraseKey) -> None:
        """Remove the file, unless another process wrote or used it since this one did."""
        path = self.path(key)
        mine = self._mtimes.pop(key.digest, None)
        try:
            if path.stat().st_mtime_ns != mine:
                self.kept_for_others += 1
                return
            path.unlink()
        except FileNotFoundError:
            return
        self.deletes += 1

    def touch(self, key: PhraseKey, phrase: CachedPhrase | None = None) -> None:
        """Mark as recently used, so the next start-up loads it first (and other processes
        sharing the directory leave it alone). Gone (another process evicted it while nobody
        used it), it is written again from ``phrase``."""
        stamp = time.time_ns()
        try:
            os.utime(self.path(key), ns=(stamp, stamp))
        except FileNotFoundError:
            if phrase is not None:
                self.rewrites += 1
                self.write(key, phrase)
            return
        except OSError:
            return
        self._mtimes[key.digest] = stamp

    def stats(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "loaded": self.loaded,
            "writes": self.writes,
            "write_errors": self.write_errors,
            "deletes": self.deletes,
            "kept_for_others": self.kept_for_others,
            "rewrites": self.rewrites,
            "corrupt_files": self.corrupt_files,
            "stale_files": self.stale_files,
        }
