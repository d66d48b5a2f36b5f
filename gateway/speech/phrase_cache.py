"""The phrase cache: already-encoded Opus frames for replies that repeat, keyed by voice and text.

A hit replays the stored packets straight into a session's frame queue: no synthesis, no
encoding. One cache per process, shared by every session; bounded in bytes with LRU eviction.

Keys carry the encoder settings (and the file format version), so changing the bitrate, FEC,
expected loss or complexity never serves frames encoded under the old settings. Text is
normalised (Unicode NFC, runs of whitespace collapsed, ends stripped) before keying.

With a directory, entries are persisted (``phrase_store``): written atomically by one
background thread, deleted when evicted, loaded (newest first, up to the bound) at start-up.
Processes sharing the directory (``--workers``) each evict in their own memory; a file is
deleted only by a process that no other has used it since (``PhraseStore.delete``: the file's
modification time tells), so one worker's eviction never takes a file another still hits, and a
hit on an entry whose file went is written again. A hit touches the file at most once per
``TOUCH_EVERY_S`` an entry: a phrase replayed to many sessions at once (a greeting to every new
caller) is one touch, not one thread hand-over per hit (docs/density.md, "The speaking
premium": 67 a second at 1,000 streams replaying one 15 s phrase). The cross-process LRU then
reads a use up to that much late, and a file gone is written again on the next touch.
Files that are corrupt or from other settings are ignored and counted, never served.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.media.opus_codec import EncoderSettings
from gateway.speech.phrase import (
    CachedPhrase,
    PhraseKey,
    PhraseRecorder,
    normalize_text,
    settings_tag,
)
from gateway.speech.phrase_store import PhraseStore

log = logging.getLogger(__name__)

ENTRY_OVERHEAD = 256  # bytes charged per entry for the key, the objects and the LRU link
DEFAULT_MAX_ENTRY_BYTES = 512 * 1024  # about two minutes of speech at 32 kbit/s
TOUCH_EVERY_S = 10.0  # a hit touches its entry's file at most this often (module docstring)


def _charge(key: PhraseKey, phrase: CachedPhrase) -> int:
    return phrase.nbytes + len(key.voice) + len(key.text.encode()) + ENTRY_OVERHEAD


class PhraseCache:
    """Bounded LRU of encoded phrases. Used from the event loop thread only."""

    def __init__(
        self,
        max_bytes: int,
        directory: Path | str | None = None,
        max_entry_bytes: int | None = None,
        settings: EncoderSettings | None = None,
    ) -> None:
        """``settings``: the process's encoder settings; persisted entries made under others
        are not loaded (they could never be hit)."""
        self.max_bytes = max(0, int(max_bytes))
        cap = DEFAULT_MAX_ENTRY_BYTES if max_entry_bytes is None else max_entry_bytes
        self.max_entry_bytes = min(cap, self.max_bytes)
        self._entries: OrderedDict[PhraseKey, tuple[CachedPhrase, int]] = OrderedDict()
        self._touched: dict[PhraseKey, float] = {}  # an entry's last touch (monotonic), if any
        self.bytes = 0
        self.hits = self.misses = self.stores = self.evictions = self.too_large = 0
        self.settings = settings or EncoderSettings()
        self.store: PhraseStore | None = None
        self._io: ThreadPoolExecutor | None = None
        if directory is not None and self.enabled:
            self.store = PhraseStore(Path(directory))
            self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="phrase-cache-io")
            self._load()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, voice: str, text: str, settings: EncoderSettings) -> PhraseKey:
        return PhraseKey(settings_tag(settings), voice, normalize_text(text))

    def get(self, key: PhraseKey) -> CachedPhrase | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        if self._io is not None:
            now = time.monotonic()
            last = self._touched.get(key)
            if last is None or now - last >= TOUCH_EVERY_S:
                self._touched[key] = now
                self._background("touch", key, entry[0])
        return entry[0]

    def __contains__(self, key: PhraseKey) -> bool:
        return key in self._entries

    def recorder(self) -> PhraseRecorder:
        return PhraseRecorder(self.max_entry_bytes)

    def put(self, key: PhraseKey, phrase: CachedPhrase) -> bool:
        """Store ``phrase`` (evicting the least recently used); False if it is not stored."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return False
        if not self._insert(key, phrase):
            return False
        self.stores += 1
        self._background("write", key, phrase)
        return True

    def put_recording(self, key: PhraseKey, recorder: PhraseRecorder) -> bool:
        """Store what ``recorder`` collected, if it kept all of it."""
        if recorder.overflowed:
            self.too_large += 1
            return False
        phrase = recorder.result()
        return phrase is not None and self.put(key, phrase)

    def _insert(self, key: PhraseKey, phrase: CachedPhrase) -> bool:
        size = _charge(key, phrase)
        if not self.enabled or phrase.nbytes > self.max_entry_bytes or size > self.max_bytes:
            self.too_large += 1
            return False
        while self.bytes + size > self.max_bytes:
            old, (_, old_size) = self._entries.popitem(last=False)
            self._touched.pop(old, None)
            self.bytes -= old_size
            self.evictions += 1
            self._background("delete", old)
        self._entries[key] = (phrase, size)
        self.bytes += size
        return True

    def clear(self) -> None:
        for key in list(self._entries):
            self._background("delete", key)
        self._entries.clear()
        self._touched.clear()
        self.bytes = 0

    def _background(self, op: str, key: PhraseKey, phrase: CachedPhrase | None = None) -> None:
        if self._io is None or self.store is None:
            return
        store = self.store
        if op == "write":
            assert phrase is not None
            self._io.submit(store.write, key, phrase)
        elif op == "delete":
            self._io.submit(store.delete, key)
        else:
            self._io.submit(store.touch, key, phrase)

    def _load(self) -> None:
        assert self.store is not None
        loaded = self.store.load(settings_tag(self.settings))
        budget = self.max_bytes
        keep: list[tuple[PhraseKey, CachedPhrase]] = []
        for key, phrase in loaded:  # newest first
            size = _charge(key, phrase)
            if size <= budget and phrase.nbytes <= self.max_entry_bytes:
                keep.append((key, phrase))
                budget -= size
            else:
                self.evictions += 1
                self._background("delete", key)
        for key, phrase in reversed(keep):  # oldest first, so the newest ends most recent
            self._insert(key, phrase)

    def flush(self) -> None:
        """Wait for pending disk writes (tests, shutdown)."""
        if self._io is not None:
            self._io.submit(lambda: None).result()

    def close(self) -> None:
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None

    def stats(self) -> dict[str, Any]:
        lookups = self.hits + self.misses
        return {
            "enabled": self.enabled,
            "entries": len(self._entries),
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
            "max_entry_bytes": self.max_entry_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "hit_ratio": round(self.hits / lookups, 4) if lookups else None,
            "stores": self.stores,
            "too_large": self.too_large,
            "evictions": self.evictions,
            "disk": None if self.store is None else self.store.stats(),
        }
