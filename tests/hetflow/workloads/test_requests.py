"""Independent requests for the load-balancer paper's setting: one-call programs from every family,
shuffled, Poisson, reproducible."""

from hetflow.workloads.requests import independent_requests

MODEL = "qwen2.5-7b-instruct"


def test_every_request_is_a_program_of_its_own_with_its_full_input_and_no_shared_prefix():
    requests = independent_requests(40, seed=3, rate_per_s=10.0, families=("chat", "math"), models=[MODEL])
    assert len(requests) == len({r.program_id for r in requests}) == 40
    assert all(r.stage_index == r.stage_count == 1 and not r.depends_on and not r.prompt_parts for r in requests)
    assert {r.workflow for r in requests} == {"chat", "math"}
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals) and 1.0 < arrivals[-1] < 10.0  # about 40 / 10 per s
    chat_turns = [r for r in requests if r.workflow == "chat" and r.input_tokens[MODEL] > 500]
    assert chat_turns  # later turns keep the conversation so far in their input


def test_the_same_arguments_give_the_same_requests():
    first = independent_requests(20, seed=1, families=("code", "sql"), models=[MODEL])
    assert first == independent_requests(20, seed=1, families=("code", "sql"), models=[MODEL])
    assert first != independent_requests(20, seed=2, families=("code", "sql"), models=[MODEL])


def test_a_model_the_traces_are_not_written_for_takes_its_stand_ins_lengths():
    qwen = independent_requests(20, seed=4, families=("chat", "code"), models=[MODEL])
    llama = independent_requests(20, seed=4, families=("chat", "code"), models=["llama-2-7b-hf"])
    assert [(r.input_tokens, r.output_tokens, r.arrival_s) for r in llama] == \
        [({"llama-2-7b-hf": r.input_tokens[MODEL]}, {"llama-2-7b-hf": r.output_tokens[MODEL]}, r.arrival_s)
         for r in qwen]
