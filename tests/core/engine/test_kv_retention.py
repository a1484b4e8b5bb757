"""A paused program's KV kept for its next call (issue 35; Continuum, arXiv 2511.02230), on handmade
programs: the KV pool's ``retain`` and the scheduler's release rules."""

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.kv_cache import KVBlockPool
from hetflow.core.engine.request import EngineRequest
from hetflow.core.engine.scheduler import BatchScheduler
from tests.factories import profile

BS = 16


def make(**overrides) -> BatchScheduler:
    values = dict(kv_capacity_tokens=8 * BS, block_size=BS, max_num_seqs=8, max_num_batched_tokens=4096)
    values.update(overrides)
    return BatchScheduler(profile(**values), AgingPriorityQueue(starvation_threshold=1000, running_quantum=100))


def call(request_id: str, program_id: str, blocks: int, output_tokens: int = 1, retain_kv_s: float = 0.0,
         first_hash: int = 1, priority: float = 0.0) -> EngineRequest:
    """A call whose prompt is ``blocks`` full blocks (hashes ``first_hash``...) and one token more."""
    hashes = tuple(range(first_hash, first_hash + blocks))
    return EngineRequest(request_id=request_id, prompt_tokens=blocks * BS + 1, max_tokens=output_tokens,
                         priority=priority, arrival_s=0.0, program_id=program_id, target_output_tokens=output_tokens,
                         block_hashes=hashes, retain_kv_s=retain_kv_s)


def drain(s: BatchScheduler, now_s: float = 0.0, steps: int = 1000) -> float:
    for _ in range(steps):
        if not s.has_work:
            return now_s
        plan = s.schedule(now_s)
        now_s += max(plan.duration_s, 1e-3)
        s.update_from_step(plan, now_s)
    raise AssertionError("did not drain")


def test_pool_retains_the_cached_run_and_frees_the_rest():
    pool = KVBlockPool(8, BS, prefix_caching=True)
    pool.acquire_prefix("a", (1, 2, 3), 3 * BS)
    assert pool.try_grow("a", 3 * BS + 5)                              # 3 full blocks and a partial one
    pool.register_full_blocks("a", (1, 2, 3), 3 * BS + 5)
    assert pool.retain("a", "program", (1, 2, 3)) == 3
    assert pool.used_blocks == 3 and pool.held("a") == 0               # the partial block went back
    assert not pool.try_grow("b", 6 * BS)                              # 5 free: the retained 3 are not evictable
    pool.free("program")
    assert pool.used_blocks == 0 and pool.cached_blocks == 3           # still findable, now evictable


def test_retaining_again_replaces_the_program_s_earlier_blocks():
    pool = KVBlockPool(8, BS, prefix_caching=True)
    for request_id, hashes in (("a", (1, 2)), ("b", (1, 2, 3))):
        pool.acquire_prefix(request_id, hashes, len(hashes) * BS)
        assert pool.try_grow(request_id, len(hashes) * BS)
        pool.register_full_blocks(request_id, hashes, len(hashes) * BS)
        pool.retain(request_id, "program", hashes)
    assert pool.used_blocks == 3 and pool.held("program") == 3


def test_next_call_within_the_hold_hits_its_prefix():
    s = make()
    s.add(call("p/1", "p", blocks=4, retain_kv_s=10.0))
    now = drain(s)
    assert s.retained_until_s["p"] > now and s.kv.used_blocks == 4
    s.add(call("other", "q", blocks=3, first_hash=100))                 # fits beside the retained blocks
    now = drain(s, now)
    nxt = call("p/2", "p", blocks=5)                                    # its context and 1 new block
    s.add(nxt)
    drain(s, now)
    assert nxt.prefix_hit_tokens == 4 * BS
    assert s.retained_released["resumed"] == 1 and not s.retained_until_s


def test_a_call_after_expiry_does_not_hit():
    s = make()
    s.add(call("p/1", "p", blocks=4, retain_kv_s=1.0))
    now = drain(s)
    s.add(call("filler", "q", blocks=7, first_hash=100))                # needs the room; waits for the expiry
    plan = s.schedule(now + 0.5)
    assert plan.is_empty and s.num_waiting == 1                          # retained room blocks it
    drain(s, now + 1.5)                                                 # expired: admitted, evicts p's blocks
    assert s.retained_released["expired"] == 1
    late = call("p/2", "p", blocks=5)
    s.add(late)
    drain(s, now + 3.0)
    assert late.prefix_hit_tokens == 0


def test_a_program_s_last_call_frees_its_kv_at_once():
    s = make()
    s.add(call("p/3", "p", blocks=4, retain_kv_s=0.0))                  # no later call: nothing retained
    drain(s)
    assert not s.retained_until_s and s.kv.used_blocks == 0


def test_retained_room_blocks_an_admission_that_would_evict_it():
    s = make()
    s.add(call("p/1", "p", blocks=4, retain_kv_s=30.0))
    now = drain(s)
    s.add(call("big", "q", blocks=6, first_hash=100))                   # 7 blocks; 4 free beside p's
    plan = s.schedule(now)
    assert plan.is_empty and s.num_waiting == 1 and s.kv.held("\x00retained/p") == 4


def test_running_requests_take_retained_room_before_preempting_each_other():
    s = make(kv_capacity_tokens=8 * BS)
    s.add(call("p/1", "p", blocks=3, retain_kv_s=30.0))
    now = drain(s)
    grower = call("g", "q", blocks=3, output_tokens=3 * BS, first_hash=100)   # grows to 6-7 blocks
    s.add(grower)
    drain(s, now)
    assert grower.preemptions == 0 and s.retained_released["pressure"] == 1 and not s.retained_until_s


def unpinned() -> BatchScheduler:
    values = dict(kv_capacity_tokens=8 * BS, block_size=BS, max_num_seqs=8, max_num_batched_tokens=4096)
    return BatchScheduler(profile(**values), AgingPriorityQueue(starvation_threshold=1000, running_quantum=100),
                          pins_retained_kv=False)


def test_an_engine_that_cannot_pin_frees_the_retained_blocks_and_keeps_their_room_from_admissions():
    s = unpinned()
    s.add(call("p/1", "p", blocks=4, retain_kv_s=30.0))
    now = drain(s)
    assert s.kv.used_blocks == 0 and s.reserved_blocks == {"p": 5}        # freed, cached; 5 blocks kept
    s.add(call("big", "q", blocks=6, first_hash=100))                    # 7 blocks: only 3 beside p's room
    plan = s.schedule(now)
    assert plan.is_empty and s.num_waiting == 1
    nxt = call("p/2", "p", blocks=5, priority=-1.0)                      # ahead of big; its room is its own
    s.add(nxt)
    plan = s.schedule(now)
    assert [c.request.request_id for c in plan.chunks] == ["p/2"]
    assert nxt.prefix_hit_tokens == 4 * BS and s.retained_released["resumed"] == 1 and not s.reserved_blocks


def test_an_engine_that_cannot_pin_lets_a_running_request_evict_the_retained_context():
    s = unpinned()
    s.add(call("p/1", "p", blocks=3, retain_kv_s=30.0))
    now = drain(s)
    grower = call("g", "q", blocks=3, output_tokens=4 * BS, first_hash=100)  # admitted beside p's room, then
    s.add(grower)                                                           # grows into it: vLLM's LRU evicts
    now = drain(s, now)
    late = call("p/2", "p", blocks=4)
    s.add(late)
    drain(s, now)
    assert grower.preemptions == 0 and late.prefix_hit_tokens < 3 * BS
