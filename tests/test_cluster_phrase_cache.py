"""A ``--phrase-cache-dir`` shared by several gateway processes (``--workers``).

Before: a worker's start-up deleted every temporary file in the directory (other workers'
writes in flight), and each worker's LRU deleted files on eviction that other workers still
hit. Now temporary names carry their writer (host, pid) and only dead writers' are removed, and
a process deletes a file only while the modification time it gave the file (written, or touched
on a hit) or saw when it loaded it is still the file's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gateway.media.opus_codec import EncoderSettings
from gateway.speech.phrase import settings_tag
from gateway.speech.phrase_cache import ENTRY_OVERHEAD, CachedPhrase, PhraseCache
from gateway.speech.phrase_store import HOST, ORPHAN_S, SUFFIX, TMP_PREFIX, PhraseStore, temp_prefix

S = EncoderSettings()
REPO = Path(__file__).resolve().parent.parent


def phrase(n: int = 20, seed: int = 0) -> CachedPhrase:
    return CachedPhrase.from_payloads([bytes([(seed + i) % 256]) * 80 for i in range(n)])


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_start_up_removes_only_temp_files_no_live_writer_will_finish(tmp_path: Path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        names = {
            "live": f"{TMP_PREFIX}{HOST}-{sleeper.pid}-abc",  # another worker, writing now
            "mine": f"{temp_prefix()}def",
            "dead": f"{TMP_PREFIX}{HOST}-{dead_pid()}-ghi",  # a worker killed mid-write
            "other host": f"{TMP_PREFIX}0123abcd-{sleeper.pid}-jkl",  # a shared disk
            "other host, old": f"{TMP_PREFIX}0123abcd-1-mno",
            "old form": f"{TMP_PREFIX}abandoned",
            "live but ancient": f"{TMP_PREFIX}{HOST}-{sleeper.pid}-pqr",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        past = time.time() - ORPHAN_S - 60
        for label in ("other host, old", "live but ancient"):
            os.utime(tmp_path / names[label], (past, past))
        # A new worker starting on the directory: its own process, as under --workers.
        subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from gateway.speech.phrase_store import PhraseStore; "
             "PhraseStore(Path(sys.argv[1])).load('tag')", str(tmp_path)],
            check=True, cwd=REPO,
        )
        left = {p.name for p in tmp_path.iterdir()}
        assert left == {names["live"], names["mine"], names["other host"]}
    finally:
        sleeper.kill()
        sleeper.wait()


def test_writes_carry_the_writer_in_their_temporary_name(tmp_path: Path, monkeypatch):
    seen: list[str] = []
    real_replace = os.replace

    def spy(src, dst):  # the temporary name, as the rename sees it
        seen.append(Path(src).name)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    cache = PhraseCache(1 << 20, tmp_path, settings=S)
    cache.put(cache.key("v", "hello", S), phrase())
    cache.flush()
    cache.close()
    assert len(seen) == 1 and seen[0].startswith(f"{TMP_PREFIX}{HOST}-{os.getpid()}-")


def test_an_eviction_leaves_files_another_worker_uses(tmp_path: Path):
    one = phrase()
    size = one.nbytes + ENTRY_OVERHEAD + 1 + 2
    a = PhraseCache(2 * size + 10, tmp_path, settings=S)  # room for two entries
    k0, k1, k2 = (a.key("v", f"t{i}", S) for i in range(3))
    a.put(k0, phrase(seed=0))
    a.put(k1, phrase(seed=1))
    a.flush()
    b = PhraseCache(2 * size + 10, tmp_path, settings=S)  # another worker starts: loads both
    assert len(b) == 2
    assert b.get(k0) is not None  # ... and keeps using t0
    b.flush()
    time.sleep(0.01)
    a.put(k2, phrase(seed=2))  # a's LRU evicts t0
    a.flush()
    assert (tmp_path / f"{k0.digest}{SUFFIX}").exists()  # b's: left alone
    assert a.stats()["disk"]["kept_for_others"] == 1 and a.stats()["disk"]["deletes"] == 0
    # b evicts t0 in its turn; nobody used it since: now it goes.
    b.put(k2, phrase(seed=2))  # evicts t1 (b's least recent), not yet t0
    b.put(b.key("v", "t3", S), phrase(seed=3))  # evicts t0
    b.flush()
    assert not (tmp_path / f"{k0.digest}{SUFFIX}").exists()
    # t1: a wrote it and b loaded it; nobody used it since, so b's eviction deleted it (an LRU
    # across the workers). a still holds it in memory: its next hit writes it again.
    assert not (tmp_path / f"{k1.digest}{SUFFIX}").exists()
    assert a.get(k1) is not None
    a.flush()
    assert (tmp_path / f"{k1.digest}{SUFFIX}").exists()
    assert a.stats()["disk"]["rewrites"] == 1
    a.close()
    b.close()


def test_a_file_nobody_else_touched_is_deleted_on_eviction(tmp_path: Path):
    one = phrase()
    size = one.nbytes + ENTRY_OVERHEAD + 1 + 2
    cache = PhraseCache(size + 10, tmp_path, settings=S)
    k0, k1 = cache.key("v", "t0", S), cache.key("v", "t1", S)
    cache.put(k0, phrase(seed=0))
    cache.get(k0)  # touched by us: still ours
    cache.put(k1, phrase(seed=1))  # evicts t0
    cache.flush()
    assert not (tmp_path / f"{k0.digest}{SUFFIX}").exists()
    assert cache.stats()["disk"]["deletes"] == 1
    cache.close()


def test_store_delete_checks_the_modification_time(tmp_path: Path):
    store = PhraseStore(tmp_path)
    other = PhraseStore(tmp_path)  # another process's view of the same directory
    cache = PhraseCache(1 << 20, settings=S)
    k = cache.key("v", "shared", S)
    store.write(k, phrase())
    assert other.load(settings_tag(S))  # the other one loads it ...
    other.touch(k)  # ... and uses it
    store.delete(k)
    assert store.path(k).exists() and store.kept_for_others == 1
    other.delete(k)
    assert not store.path(k).exists() and other.deletes == 1


def test_hits_touch_an_entry_s_file_at_most_once_per_interval(tmp_path: Path, monkeypatch):
    """A phrase replayed to many sessions at once is one touch of its file, not one a hit; after
    ``TOUCH_EVERY_S`` the next hit touches again, and writes back a file another worker
    deleted meanwhile."""
    from gateway.speech import phrase_cache

    clock = [1_000.0]
    monkeypatch.setattr(phrase_cache.time, "monotonic", lambda: clock[0])
    touched: list[str] = []
    real_touch = PhraseStore.touch

    def spy(store: PhraseStore, key: Any, phrase: Any = None) -> None:
        touched.append(key.text)
        real_touch(store, key, phrase)

    monkeypatch.setattr(PhraseStore, "touch", spy)
    cache = PhraseCache(1 << 20, tmp_path, settings=S)
    hello, bye = cache.key("v", "hello", S), cache.key("v", "bye", S)
    cache.put(hello, phrase(seed=0))
    cache.put(bye, phrase(seed=1))
    for _ in range(50):
        assert cache.get(hello) is not None
    assert cache.get(bye) is not None  # each entry its own interval
    cache.flush()
    assert touched == ["hello", "bye"] and cache.hits == 51
    (tmp_path / f"{hello.digest}{SUFFIX}").unlink()  # another worker's eviction
    clock[0] += phrase_cache.TOUCH_EVERY_S - 0.5
    cache.get(hello)
    cache.flush()
    assert touched == ["hello", "bye"]
    clock[0] += 0.5
    cache.get(hello)
    cache.flush()
    assert touched == ["hello", "bye", "hello"]
    assert (tmp_path / f"{hello.digest}{SUFFIX}").exists()  # written again
    assert cache.stats()["disk"]["rewrites"] == 1
    cache.close()
