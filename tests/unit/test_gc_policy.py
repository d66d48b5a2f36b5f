import gc
import weakref

from gateway.runtime.gc_policy import GcPolicy


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def test_collections_are_timed_per_generation():
    policy = GcPolicy()
    try:
        before = list(policy.stats.collections)
        gc.collect(0)
        gc.collect(2)
        assert policy.stats.collections[0] == before[0] + 1
        assert policy.stats.collections[2] == before[2] + 1
        assert policy.stats.max_pause_ms[2] > 0
    finally:
        policy.close()
    assert policy._on_gc not in gc.callbacks


def test_frozen_garbage_is_reclaimed_when_the_last_session_closes():
    policy = GcPolicy(collect_every=1000)
    try:
        gc.collect()
        node = Node()
        alive = weakref.ref(node)
        policy.freeze()  # frozen: a full collection no longer sees it
        del node
        gc.collect()
        assert alive() is not None
        policy.session_closed(remaining=1)
        assert policy.stats.reclaims == 0 and alive() is not None
        policy.session_closed(remaining=0)
        assert policy.stats.reclaims == 1 and alive() is None
        assert gc.get_freeze_count() == policy.stats.frozen_objects
    finally:
        policy.close()
        gc.unfreeze()


def test_disabled_policy_never_freezes():
    policy = GcPolicy(enabled=False)
    try:
        policy.freeze()
        policy.session_closed(remaining=0)
        assert policy.stats.freezes == 0 and policy.stats.reclaims == 0
    finally:
        policy.close()
