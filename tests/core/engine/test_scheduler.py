"""Continuous batching: token conservation, KV capacity, preemption by recompute, queue order."""

import pytest

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import RequestStatus
from hetflow.core.engine.scheduler import BatchScheduler
from tests.factories import profile, request


def make(**overrides) -> BatchScheduler:
    return BatchScheduler(profile(**overrides), AgingPriorityQueue(starvation_threshold=1000, running_quantum=100))


def run_to_completion(s: BatchScheduler, max_steps: int = 10_000) -> list:
    now, finished = 0.0, []
    for _ in range(max_steps):
        if not s.has_work:
            return finished
        plan = s.schedule(now)
        assert s.kv.used_blocks <= s.kv.num_blocks
        now += plan.duration_s
        finished += [e.request for e in s.update_from_step(plan, now) if e.finished]
    raise AssertionError("did not drain")


def test_every_request_gets_exactly_its_tokens():
    s = make()
    reqs = [request(prompt_tokens=p, output_tokens=o) for p, o in [(10, 5), (300, 1), (40, 30), (700, 3)]]
    for r in reqs:
        s.add(r)
    finished = run_to_completion(s)
    assert set(finished) == set(reqs)
    assert all(r.output_tokens == r.target_output_tokens and r.status == RequestStatus.FINISHED for r in reqs)
    assert s.kv.used_blocks == 0


def test_preempts_under_kv_pressure_and_still_conserves_tokens():
    s = make(kv_capacity_tokens=256, block_size=16, max_num_seqs=8)
    reqs = [request(prompt_tokens=40, output_tokens=60, priority=i) for i in range(4)]
    for r in reqs:
        s.add(r)
    run_to_completion(s)
    assert s.preemptions_total > 0
    assert all(r.output_tokens == 60 for r in reqs)


def test_preemption_victim_is_worst_key():
    s = make(kv_capacity_tokens=128, block_size=16, max_num_seqs=8)
    good = request(prompt_tokens=48, output_tokens=40, priority=1)
    bad = request(prompt_tokens=48, output_tokens=40, priority=9)
    s.add(good)
    s.add(bad)
    run_to_completion(s)
    assert good.preemptions == 0 and bad.preemptions > 0


def test_admits_in_queue_order_and_head_blocks():
    s = make(kv_capacity_tokens=160, block_size=16, max_num_batched_tokens=4096)
    big = request(prompt_tokens=150, output_tokens=2, priority=1)
    small = request(prompt_tokens=8, output_tokens=2, priority=2)
    hog = request(prompt_tokens=100, output_tokens=50, priority=0)
    s.add(hog)
    s.schedule(0.0)
    s.add(big)
    s.add(small)
    plan = s.schedule(0.0)
    scheduled = {c.request.request_id for c in plan.chunks}
    assert big.request_id not in scheduled and small.request_id not in scheduled  # small does not jump the head


def test_chunked_prefill_respects_token_budget():
    s = make(max_num_batched_tokens=64, kv_capacity_tokens=4096)
    r = request(prompt_tokens=200, output_tokens=1)
    s.add(r)
    plan = s.schedule(0.0)
    assert plan.prefill_tokens == 64
    s.update_from_step(plan, 0.0)
    assert r.output_tokens == 0 and r.num_computed_tokens == 64


def test_step_time_follows_profile():
    p = profile(decode_base_ms=5, prefill_ms_per_token=0.01, decode_ms_per_seq=0.1, decode_ms_per_batch_token=0.001)
    assert p.step_ms(prefill_tokens=100, decode_seqs=2, decode_context_tokens=1000) == pytest.approx(5 + 1 + 0.2 + 1)


def test_rejects_requests_that_can_never_fit():
    s = make(kv_capacity_tokens=256, max_model_len=100_000)
    with pytest.raises(MemoryError):
        s.add(request(prompt_tokens=250, output_tokens=100))
    with pytest.raises(ValueError):
        make(max_model_len=64).add(request(prompt_tokens=60, output_tokens=10))


def test_abort_frees_blocks():
    s = make()
    r = request(prompt_tokens=100, output_tokens=50)
    s.add(r)
    s.update_from_step(s.schedule(0.0), 0.0)
    assert s.kv.used_blocks > 0
    s.abort(r.request_id, 0.0)
    assert s.kv.used_blocks == 0 and not s.has_work and r.status == RequestStatus.ABORTED


def test_queue_time_counts_the_waits_after_preemptions():
    s = make(kv_capacity_tokens=128, block_size=16, max_num_seqs=8)
    good = request(prompt_tokens=48, output_tokens=40, priority=1, arrival_s=0.0)
    bad = request(prompt_tokens=48, output_tokens=40, priority=9, arrival_s=0.0)
    s.add(good)
    s.add(bad)
    now, waiting_since, expected_s = 0.0, {good: 0.0, bad: 0.0}, {good: 0.0, bad: 0.0}
    while s.has_work:
        before = {r: r.status for r in (good, bad)}
        plan = s.schedule(now)
        for r in (good, bad):
            if before[r] != RequestStatus.RUNNING and r.status == RequestStatus.RUNNING:
                expected_s[r] += now - waiting_since[r]
            if before[r] == RequestStatus.RUNNING and r.status == RequestStatus.PREEMPTED:
                waiting_since[r] = now
        now += plan.duration_s
        s.update_from_step(plan, now)
    assert bad.preemptions > 0
    assert bad.queued_s == pytest.approx(expected_s[bad])
    assert bad.queued_s > bad.first_scheduled_s - bad.arrival_s
    assert good.queued_s == pytest.approx(expected_s[good])


def test_sim_backend_queue_deltas_sum_to_the_request_queue_time():
    from engine_svc.backends.sim import _queued_delta_s

    s = make(kv_capacity_tokens=128, block_size=16, max_num_seqs=8)
    bad = request(prompt_tokens=48, output_tokens=40, priority=9, arrival_s=0.0)
    s.add(request(prompt_tokens=48, output_tokens=40, priority=1, arrival_s=0.0))
    s.add(bad)
    now, reported = 0.0, 0.0
    while s.has_work:
        plan = s.schedule(now)
        now += plan.duration_s
        for event in s.update_from_step(plan, now):
            if event.request is bad:
                reported += _queued_delta_s(bad, event.finished)
    assert bad.preemptions > 0 and reported == pytest.approx(bad.queued_s)


def test_the_first_token_comes_at_the_end_of_the_last_prefill_chunk_and_is_kept_through_preemptions():
    s = make(max_num_batched_tokens=64, kv_capacity_tokens=256, block_size=16, max_num_seqs=8)
    long_prompt = request(prompt_tokens=150, output_tokens=40, priority=10)  # 3 chunks of <= 64 tokens; the victim
    s.add(long_prompt)
    now, ends = 0.0, []
    while long_prompt.first_token_s is None:
        plan = s.schedule(now)
        now += plan.duration_s
        s.update_from_step(plan, now)
        ends.append(now)
    assert len(ends) == 3 and long_prompt.first_token_s == ends[-1]
    contenders = [request(prompt_tokens=40, output_tokens=60, priority=i) for i in range(4)]
    for r in contenders:
        s.add(r)
    run_to_completion(s)
    assert long_prompt.preemptions > 0 and long_prompt.first_token_s == ends[-1]
    assert all(r.first_token_s is not None and r.first_token_s <= r.finished_s for r in contenders)
