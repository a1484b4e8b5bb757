"""Room reserved for decode growth (issue 35) on handmade batches: a batch that, admitted on prompt blocks
alone, grows into preemptions runs without any when each request reserves its output."""

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import EngineRequest
from hetflow.core.engine.scheduler import BatchScheduler
from tests.factories import profile

BS = 16


def make() -> BatchScheduler:
    return BatchScheduler(profile(kv_capacity_tokens=12 * BS, block_size=BS, max_num_seqs=8,
                                  max_num_batched_tokens=4096),
                          AgingPriorityQueue(starvation_threshold=1000, running_quantum=100))


def grower(request_id: str, reserve: int, priority: float) -> EngineRequest:
    """Two blocks of prompt that grow by four blocks of output."""
    return EngineRequest(request_id=request_id, prompt_tokens=2 * BS, max_tokens=4 * BS, priority=priority,
                         arrival_s=priority, target_output_tokens=4 * BS, reserve_output_tokens=reserve)


def run(s: BatchScheduler) -> list[EngineRequest]:
    now, finished = 0.0, []
    while s.has_work:
        plan = s.schedule(now)
        now += max(plan.duration_s, 1e-3)
        finished += [e.request for e in s.update_from_step(plan, now) if e.finished]
    return finished


def test_without_a_reserve_the_batch_grows_into_preemptions():
    s = make()
    reqs = [grower(f"r{i}", 0, i) for i in range(3)]    # 3 x 6 blocks of 12: all admitted, then preempted
    for r in reqs:
        s.add(r)
    assert len(run(s)) == 3 and s.preemptions_total > 0


def test_with_the_output_reserved_nobody_is_preempted_and_every_request_finishes():
    s = make()
    reqs = [grower(f"r{i}", 4 * BS, i) for i in range(3)]
    for r in reqs:
        s.add(r)
    plan = s.schedule(0.0)
    assert [c.request.request_id for c in plan.chunks] == ["r0", "r1"]  # 2 x 6 blocks fill the 12; r2 waits
    assert s.reserved_growth_blocks() == 2 * 4 - 0 and s.num_waiting == 1
    s.update_from_step(plan, 0.01)
    assert len(run(s)) == 3 and s.preemptions_total == 0


def test_a_request_alone_is_admitted_whatever_its_reserve():
    s = make()
    big = EngineRequest(request_id="big", prompt_tokens=2 * BS, max_tokens=8, priority=0.0, arrival_s=0.0,
                        target_output_tokens=8, reserve_output_tokens=100 * BS)
    s.add(big)
    assert [c.request for c in s.schedule(0.0).chunks] == [big]
