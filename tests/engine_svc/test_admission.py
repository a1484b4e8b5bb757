"""When a vLLM engine has room for hetflow's head request: sequences, and KV blocks with a watermark, each block
the requests share counted once."""

import pytest

from engine_svc.backends.admission import SharedPromptBlocks, check_admissible, has_room
from hetflow.core.engine.request import EngineRequest
from hetflow.core.errors import ResourceExhausted
from hetflow.core.prefix import token_block_hashes


def req(prompt_tokens: int, output_tokens: int = 0) -> EngineRequest:
    r = EngineRequest(request_id=f"r{prompt_tokens}-{output_tokens}", prompt_tokens=prompt_tokens, max_tokens=64,
                      priority=0.0, arrival_s=0.0)
    r.output_tokens = output_tokens
    return r


def test_full_sequence_slots_leave_no_room():
    assert not has_room(req(10), [req(10), req(10)], max_num_seqs=2, kv_usage=0.0, num_blocks=1000, block_size=16)


def test_the_head_needs_its_prompt_blocks_plus_the_watermark():
    # 100 blocks, watermark 1 block; the running request holds ceil((1500+100+1)/16) = 101 -> none free
    assert not has_room(req(16), [req(1500, 100)], 8, 0.0, num_blocks=100, block_size=16)
    # 80 free blocks: a 79-block prompt (1263 tokens + 1) plus the watermark fits, an 80-block one does not
    assert has_room(req(1263), [], 8, 0.2, num_blocks=100, block_size=16)
    assert not has_room(req(1264), [], 8, 0.2, num_blocks=100, block_size=16)


def test_a_prompt_idle_admission_would_never_take_is_refused_before_it_queues():
    """100 blocks of 16: an idle engine takes a prompt whose blocks (prompt + 1 tokens) leave one block for
    the watermark, 99 * 16 - 1 tokens at most; one token more fits the KV with max_tokens 1 yet would wait
    at the queue's head for good, and every call behind it."""
    largest = 99 * 16 - 1
    check_admissible(largest, 1, num_blocks=100, block_size=16)
    assert has_room(req(largest), [], 8, 0.0, num_blocks=100, block_size=16)
    with pytest.raises(ResourceExhausted, match="watermark"):
        check_admissible(largest + 1, 1, num_blocks=100, block_size=16)
    assert not has_room(req(largest + 1), [], 8, 0.0, num_blocks=100, block_size=16)
    with pytest.raises(ResourceExhausted, match="KV tokens"):
        check_admissible(1000, 700, num_blocks=100, block_size=16)


def test_the_servers_own_report_counts_when_it_is_higher():
    assert not has_room(req(16), [], 8, kv_usage=0.99, num_blocks=100, block_size=16)


def reserving(prompt_tokens: int, reserve: int, output_tokens: int = 0) -> EngineRequest:
    r = req(prompt_tokens, output_tokens)
    r.reserve_output_tokens = reserve
    return r


def test_a_reserve_keeps_room_for_the_running_requests_growth_and_the_head_s():
    # running: 20 blocks held (319 + 1 tokens), growing to 40 (319 + 320 reserved)
    running = [reserving(319, 320)]
    head = reserving(159, 160)                     # 10 blocks, growing to 20
    # 55 blocks, no watermark (int(0.55)): 35 free
    assert has_room(req(159), running, 8, 0.0, num_blocks=55, block_size=16)    # no reserve: 10 <= 35
    assert not has_room(head, running, 8, 0.0, num_blocks=55, block_size=16)    # 10 + growth 20 + 10 > 35
    assert has_room(head, running, 8, 0.0, num_blocks=100, block_size=16)       # 80 free >= 10 + 1 + 20 + 10
    alone = reserving(159, 10_000)
    assert has_room(alone, [], 8, 0.0, num_blocks=100, block_size=16)           # nothing beside it: its prompt only


def test_retained_contexts_count_as_used_room():
    # 80 blocks free by vLLM's report; a 1,000-token context held for its program takes 63 of them
    assert has_room(req(319), [], 8, 0.2, num_blocks=100, block_size=16)
    assert not has_room(req(319), [], 8, 0.2, num_blocks=100, block_size=16, retained_tokens=1000)


def sharing(request_id: str, token_ids: list[int]) -> EngineRequest:
    return EngineRequest(request_id=request_id, prompt_tokens=len(token_ids), max_tokens=64, priority=0.0,
                         arrival_s=0.0, block_hashes=token_block_hashes(token_ids, 16))


def started(*requests: EngineRequest) -> SharedPromptBlocks:
    shared = SharedPromptBlocks()
    for r in requests:
        shared.add(r)
    return shared


def test_blocks_the_requests_share_count_once_as_vllm_s_prefix_cache_holds_them():
    system = list(range(64))                                       # 4 full blocks every call begins with
    running = [sharing("a", system + [1000 + i for i in range(96)]),
               sharing("b", system + [2000 + i for i in range(96)])]
    head = sharing("c", system + [3000 + i for i in range(96)])    # 160 tokens + 1: 11 blocks, 4 of them held
    # held: 11 + 11 - 4 = 18 of 27 blocks (no watermark: int(0.27)); the head needs 11 - 4 = 7 <= 9 free
    assert has_room(head, running, 8, 0.0, num_blocks=27, block_size=16, shared=started(*running))
    assert not has_room(head, running, 8, 0.0, num_blocks=24, block_size=16, shared=started(*running))  # 6 < 7
    assert not has_room(head, running, 8, 0.0, num_blocks=27, block_size=16)  # every block counted: 5 free < 11
    apart = [sharing("a", [1000 + i for i in range(160)]), sharing("b", [2000 + i for i in range(160)])]
    assert not has_room(sharing("c", [3000 + i for i in range(160)]), apart, 8, 0.0, num_blocks=27, block_size=16,
                        shared=started(*apart))


def test_the_shared_blocks_follow_the_requests_as_they_start_and_end():
    system = list(range(64))
    a, b = sharing("a", system + [1] * 40), sharing("b", system + [2] * 40)   # 6 full blocks each, 4 alike
    shared = started(a, b)
    assert shared.duplicate_blocks == 4 and shared.held_prefix(sharing("c", system + [3] * 40)) == 4
    assert shared.held_prefix(a) == 6
    shared.remove(a)
    assert shared.duplicate_blocks == 0 and shared.held_prefix(a) == 4   # b holds the system prompt still
    shared.remove(b)
    assert shared.duplicate_blocks == 0 and shared.held_prefix(b) == 0
