import os
from pathlib import Path

import pytest

from gateway.media.opus_codec import EncoderSettings
from gateway.speech.phrase_cache import (
    ENTRY_OVERHEAD,
    CachedPhrase,
    PhraseCache,
    PhraseKey,
    normalize_text,
    settings_tag,
)
from gateway.speech.phrase_store import SUFFIX, decode_entry, encode_entry

S = EncoderSettings()


def phrase(n: int = 10, size: int = 80, seed: int = 0) -> CachedPhrase:
    payloads = [bytes([(seed + i) % 256]) * (size + i % 3) for i in range(n)]
    return CachedPhrase.from_payloads(payloads)


def key(cache: PhraseCache, text: str, voice: str = "v", settings: EncoderSettings = S):
    return cache.key(voice, text, settings)


def test_text_is_normalised_for_the_key():
    assert normalize_text("  Hello,\n\tworld  ") == "Hello, world"
    assert normalize_text("cafe\u0301") == "caf\u00e9"  # NFC
    cache = PhraseCache(1 << 20)
    assert key(cache, " Hi  there ") == key(cache, "Hi there")
    assert key(cache, "Hi there") != key(cache, "hi there")  # case can change prosody
    assert key(cache, "Hi", "a") != key(cache, "Hi", "b")


def test_encoder_settings_are_part_of_the_key():
    cache = PhraseCache(1 << 20)
    cache.put(key(cache, "hello"), phrase())
    assert cache.get(key(cache, "hello", settings=EncoderSettings(bitrate=24_000))) is None
    assert cache.get(key(cache, "hello", settings=EncoderSettings(fec=False))) is None
    assert cache.get(key(cache, "hello")) is not None
    assert settings_tag(S) != settings_tag(EncoderSettings(complexity=5))


def test_hit_returns_the_same_payloads_and_counts():
    cache = PhraseCache(1 << 20)
    original = phrase(25)
    assert cache.get(key(cache, "a")) is None
    assert cache.put(key(cache, "a"), original)
    got = cache.get(key(cache, "a"))
    assert got is not None and list(got.frames) == list(original.frames)
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["stores"], stats["entries"]) == (1, 1, 1, 1)
    assert stats["bytes"] >= original.nbytes and stats["hit_ratio"] == 0.5
    assert not cache.put(key(cache, "a"), original)  # already there: not stored twice
    assert cache.stats()["stores"] == 1


def test_lru_eviction_keeps_the_bound():
    one = phrase(20)
    size = one.nbytes + ENTRY_OVERHEAD + 1 + 2  # voice "v", text "tN"
    cache = PhraseCache(3 * size + 10)
    for i in range(3):
        assert cache.put(key(cache, f"t{i}"), phrase(20, seed=i))
    assert cache.get(key(cache, "t0")) is not None  # t0 is now the most recently used
    assert cache.put(key(cache, "t3"), phrase(20, seed=3))
    assert cache.get(key(cache, "t1")) is None  # the least recently used went
    assert all(cache.get(key(cache, t)) is not None for t in ("t0", "t2", "t3"))
    stats = cache.stats()
    assert stats["evictions"] == 1 and stats["entries"] == 3
    assert stats["bytes"] <= cache.max_bytes


def test_entries_over_the_per_entry_cap_are_not_stored():
    cache = PhraseCache(1 << 20, max_entry_bytes=1000)
    assert not cache.put(key(cache, "long"), phrase(20, 80))
    assert cache.stats()["too_large"] == 1 and len(cache) == 0
    recorder = cache.recorder()
    for _ in range(100):
        recorder.add(b"x" * 80)
    assert recorder.overflowed and recorder.result() is None
    assert not cache.put_recording(key(cache, "long"), recorder)
    assert cache.stats()["too_large"] == 2
    small = cache.recorder()
    small.add(b"ab")
    small.add(b"c")
    result = small.result()
    assert result is not None and list(result.frames) == [b"ab", b"c"]


def test_zero_megabytes_disables():
    cache = PhraseCache(0)
    assert not cache.enabled
    assert not cache.put(key(cache, "a"), phrase())
    assert cache.get(key(cache, "a")) is None


def test_file_format_round_trip():
    k = PhraseKey(settings_tag(S), "joe", "Hello, 世界")
    p = phrase(7)
    k2, p2 = decode_entry(encode_entry(k, p))
    assert k2 == k and list(p2.frames) == list(p.frames)


def test_persistence_survives_a_restart(tmp_path: Path):
    cache = PhraseCache(1 << 20, tmp_path, settings=S)
    for i in range(3):
        cache.put(key(cache, f"phrase {i}"), phrase(10, seed=i))
    cache.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) == 3 and all(f.suffix == SUFFIX for f in files)
    again = PhraseCache(1 << 20, tmp_path, settings=S)
    got = again.get(key(again, "phrase 1"))
    assert got is not None and list(got.frames) == list(phrase(10, seed=1).frames)
    assert again.stats()["disk"]["loaded"] == 3 and len(again) == 3
    again.close()


def test_other_encoder_settings_never_load(tmp_path: Path):
    cache = PhraseCache(1 << 20, tmp_path, settings=S)
    cache.put(key(cache, "hello"), phrase())
    cache.close()
    other = EncoderSettings(bitrate=48_000)
    changed = PhraseCache(1 << 20, tmp_path, settings=other)
    assert len(changed) == 0 and changed.stats()["disk"]["stale_files"] == 1
    assert changed.get(key(changed, "hello", settings=other)) is None
    changed.close()


def test_corrupt_files_are_ignored_and_counted(tmp_path: Path):
    cache = PhraseCache(1 << 20, tmp_path, settings=S)
    for text in ("good", "flipped", "truncated", "renamed"):
        cache.put(key(cache, text), phrase())
    cache.close()
    by_text = {t: tmp_path / f"{key(cache, t).digest}{SUFFIX}" for t in
               ("good", "flipped", "truncated", "renamed")}
    data = bytearray(by_text["flipped"].read_bytes())
    data[len(data) // 2] ^= 0xFF
    by_text["flipped"].write_bytes(bytes(data))
    by_text["truncated"].write_bytes(by_text["truncated"].read_bytes()[:-9])
    by_text["renamed"].rename(tmp_path / f"{'0' * 40}{SUFFIX}")
    (tmp_path / f"{'1' * 40}{SUFFIX}").write_bytes(b"garbage")
    (tmp_path / ".tmp-abandoned").write_bytes(b"half a write")
    again = PhraseCache(1 << 20, tmp_path, settings=S)
    disk = again.stats()["disk"]
    assert disk["corrupt_files"] == 4 and disk["loaded"] == 1
    assert again.get(key(again, "good")) is not None
    assert again.get(key(again, "flipped")) is None
    assert not (tmp_path / ".tmp-abandoned").exists()
    again.close()


def test_eviction_deletes_the_file_and_load_respects_the_bound(tmp_path: Path):
    one = phrase(20)
    size = one.nbytes + ENTRY_OVERHEAD + 1 + 2
    cache = PhraseCache(2 * size + 10, tmp_path, settings=S)
    for i in range(3):
        cache.put(key(cache, f"t{i}"), phrase(20, seed=i))
    cache.flush()
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2
    cache.close()
    # A smaller bound at start-up keeps the newest entries and drops the rest from disk.
    newest = tmp_path / f"{key(cache, 't2').digest}{SUFFIX}"
    os.utime(newest, (2e9, 2e9))
    small = PhraseCache(size + 10, tmp_path, settings=S)
    assert len(small) == 1 and small.get(key(small, "t2")) is not None
    small.close()
    assert [p.name for p in tmp_path.glob(f"*{SUFFIX}")] == [newest.name]


def test_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = PhraseCache(1 << 20, tmp_path, settings=S)

    def failing_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    cache.put(key(cache, "doomed"), phrase())
    cache.flush()
    assert list(tmp_path.iterdir()) == []  # no partial file, no temp file left
    assert cache.stats()["disk"]["write_errors"] == 1
    assert cache.get(key(cache, "doomed")) is not None  # memory still serves it
    cache.close()


def test_replays_hand_out_the_cached_packets_themselves():
    from array import array

    from gateway.speech.phrase_cache import CachedPhrase

    packets = [bytes([i]) * (20 + i) for i in range(30)]
    phrase = CachedPhrase.from_payloads(packets)
    assert list(phrase.frames) == packets
    assert all(a is b for a, b in zip(phrase.frames, packets, strict=True))  # no copies
    loaded = CachedPhrase(phrase.blob, phrase.lengths)  # the on-disk form round-trips
    assert list(loaded.frames) == packets and phrase.lengths == array("H", range(20, 50))
    assert phrase.nbytes >= sum(map(len, packets))
