"""vLLM's automatic prefix caching in the engine model, on handmade block-hash sequences."""

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.kv_cache import KVBlockPool
from hetflow.core.engine.scheduler import BatchScheduler
from tests.factories import profile, request

BS = 16


def run_once(pool: KVBlockPool, request_id: str, hashes: tuple[int, ...], prompt_tokens: int) -> int:
    """Admit, compute the whole prompt, finish; returns the tokens found in the cache."""
    hit = pool.acquire_prefix(request_id, hashes, prompt_tokens - 1)
    assert pool.try_grow(request_id, prompt_tokens)
    pool.register_full_blocks(request_id, hashes, prompt_tokens)
    pool.free(request_id)
    return hit


def test_a_shared_prefix_hits_and_a_different_one_misses():
    pool = KVBlockPool(64, BS, prefix_caching=True)
    assert run_once(pool, "a", (1, 2, 3), 3 * BS + 5) == 0
    assert run_once(pool, "b", (1, 2, 9), 3 * BS + 5) == 2 * BS     # blocks 1 and 2 shared, 9 is new
    assert run_once(pool, "c", (7, 2, 3), 3 * BS + 5) == 0           # chained: a different first block


def test_at_most_the_prompt_less_one_token_is_reused():
    pool = KVBlockPool(64, BS, prefix_caching=True)
    run_once(pool, "a", (1, 2, 3), 3 * BS)
    assert run_once(pool, "b", (1, 2, 3), 3 * BS) == 2 * BS          # the last block recomputes one token


def test_freed_blocks_are_evicted_least_recent_first_and_a_request_tail_first():
    pool = KVBlockPool(4, BS, prefix_caching=True)
    run_once(pool, "a", (1, 2), 2 * BS + 1)                          # 3 blocks, 2 cached, all free again
    assert pool.cached_blocks == 2 and pool.free_blocks == 4
    assert pool.try_grow("big", 3 * BS)                              # 2 never used + evicts 1: hash 2, the tail
    assert pool.cached_blocks == 1
    pool.free("big")
    assert run_once(pool, "b", (1, 2), 2 * BS + 1) == BS             # block 1 survives, block 2 was evicted


def test_a_block_held_by_a_running_request_is_shared_not_copied():
    pool = KVBlockPool(8, BS, prefix_caching=True)
    pool.acquire_prefix("a", (1, 2), 3 * BS)
    assert pool.try_grow("a", 3 * BS)
    pool.register_full_blocks("a", (1, 2), 3 * BS)
    used = pool.used_blocks
    assert pool.acquire_prefix("b", (1, 2), 3 * BS) == 2 * BS and pool.used_blocks == used
    pool.free("a")
    assert pool.used_blocks == 2                                     # b still holds both shared blocks


def test_without_prefix_caching_nothing_is_reused():
    pool = KVBlockPool(64, BS, prefix_caching=False)
    run_once(pool, "a", (1, 2, 3), 3 * BS + 5)
    assert run_once(pool, "b", (1, 2, 3), 3 * BS + 5) == 0


def test_the_scheduler_skips_prefill_for_the_cached_prefix():
    prof = profile(block_size=BS, max_num_batched_tokens=4096, kv_capacity_tokens=4096)
    sched = BatchScheduler(prof, AgingPriorityQueue())

    def prefill_of(req) -> int:
        sched.add(req)
        plan = sched.schedule(0.0)
        tokens = plan.prefill_tokens
        now = 0.0
        while sched.has_work:
            now += 0.01
            sched.update_from_step(plan, now)
            plan = sched.schedule(now)
        return tokens

    first = request(prompt_tokens=10 * BS + 3, output_tokens=2)
    first.block_hashes = tuple(range(10))
    assert prefill_of(first) == 10 * BS + 3
    second = request(prompt_tokens=10 * BS + 3, output_tokens=2)
    second.block_hashes = tuple(range(8)) + (99, 100)
    assert prefill_of(second) == 2 * BS + 3 and second.prefix_hit_tokens == 8 * BS
    assert sched.prefix_query_tokens == 2 * (10 * BS + 3)


def test_blocks_filled_while_decoding_are_cached_for_the_next_prompt():
    pool = KVBlockPool(64, BS, prefix_caching=True)
    sequence = (1, 2, 3, 4)                                  # 2 prompt blocks, then 2 of output
    pool.acquire_prefix("a", sequence, 2 * BS - 1)
    assert pool.try_grow("a", 2 * BS)
    pool.register_full_blocks("a", sequence, 2 * BS)         # the prefill
    assert pool.try_grow("a", 4 * BS)
    pool.register_full_blocks("a", sequence, 3 * BS)         # decoding, step by step
    pool.register_full_blocks("a", sequence, 4 * BS)
    pool.free("a")
    assert run_once(pool, "b", (1, 2, 3, 4, 5), 5 * BS + 3) == 4 * BS   # the next turn reuses prompt and output
