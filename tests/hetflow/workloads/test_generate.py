"""Traces: reproducible by seed, and each family has the structure it claims."""

import statistics

import pytest

from hetflow.core.trace import programs, prompt_parts, read_jsonl, remaining_output_tokens, write_jsonl
from hetflow.workloads.generate import generate
from tests.factories import block_hashes_of

MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-14b-instruct")


@pytest.fixture(scope="module")
def traces():
    return {f: programs(generate(f, 60, seed=3, models=MODELS)) for f in
            ("code", "math", "chat", "sql", "kairos-qa", "kairos-report", "kairos-code", "agent")}


def test_same_seed_same_trace_and_other_seed_differs():
    a = [r.to_json() for r in generate("math", 20, seed=7, models=MODELS)]
    b = [r.to_json() for r in generate("math", 20, seed=7, models=MODELS)]
    c = [r.to_json() for r in generate("math", 20, seed=8, models=MODELS)]
    assert a == b and a != c


def test_every_record_is_complete_and_inputs_include_upstream_outputs(traces):
    for family, groups in traces.items():
        for group in groups.values():
            assert [r.stage_index for r in group] == list(range(1, len(group) + 1))
            for r in group:
                assert r.stage_count == len(group) and r.workflow == family
                assert set(r.output_tokens) == set(r.input_tokens) == set(r.correct) == set(MODELS)
                assert all(d < r.stage_index for d in r.depends_on)
                for m in MODELS:
                    upstream = sum(group[d - 1].output_tokens[m] for d in r.depends_on)
                    assert r.input_tokens[m] >= upstream + 1
            assert len({r.arrival_s for r in group}) == 1 and len({str(r.correct) for r in group}) == 1


def test_a_stage_prompt_is_the_conversation_so_far(traces):
    """Parts sum to the input; a chain's stage starts with its parent's prompt and output; parallel
    branches start with the same prefix."""
    for groups in traces.values():
        for group in groups.values():
            producers = {r.stage_index: MODELS[0] for r in group}
            parts = {r.stage_index: prompt_parts(group, r, producers) for r in group}
            for r in group:
                assert sum(p.tokens for p in parts[r.stage_index]) == r.input_tokens[MODELS[0]]
                if len(r.depends_on) == 1:
                    parent = parts[r.depends_on[0]]
                    assert parts[r.stage_index][:len(parent)] == parent
                    own_output = f"{r.program_id}/{r.depends_on[0]}/{MODELS[0]}"
                    assert parts[r.stage_index][len(parent)].key == own_output
    sql = next(g for g in traces["sql"].values() if sum(r.agent == "sql_writer" for r in g) > 1)
    writers = [block_hashes_of(prompt_parts(sql, r, {1: MODELS[0]}), 16) for r in sql if r.agent == "sql_writer"]
    assert len(set(writers)) == 1 and writers[0]                # the candidates share one prompt


def test_agent_programs_are_tool_loops_with_growing_contexts_and_tool_gaps(traces):
    for g in traces["agent"].values():
        assert 3 <= len(g) <= 20 and all(r.agent == "agent" for r in g)
        assert g[0].tool_s == 0.0 and all(0.05 <= r.tool_s <= 30.0 for r in g[1:])
        inputs = [r.input_tokens[MODELS[0]] for r in g]
        assert inputs == sorted(inputs) and inputs[-1] > inputs[0]              # each call extends the last
        assert all(r.output_tokens[MODELS[0]] < 2000 for r in g)                  # short actions
    firsts = [block_hashes_of(prompt_parts(g, g[0], {}), 16) for g in traces["agent"].values()]
    assert len({f[:20] for f in firsts}) == 1                                    # every program shares the tools


def test_each_ancestor_output_is_the_producing_models():
    group = programs(generate("code", 30, seed=3, models=MODELS))
    chain = next(g for g in group.values() if len(g) == 4)
    small = prompt_parts(chain, chain[1], {1: MODELS[0]})
    large = prompt_parts(chain, chain[1], {1: MODELS[1]})
    assert small[:-2] == large[:-2] and small[-2] != large[-2]   # the planner's output differs
    assert small[-2].tokens == chain[0].output_tokens[MODELS[0]]


@pytest.mark.parametrize("family, shapes", [
    ("code", {("planner", "coder", "qa", "coder"), ("planner", "coder"), ("coder",)}),
    ("math", {("planner", "solver", "verifier", "solver"), ("planner", "solver"), ("solver",)}),
    ("kairos-report", {("researcher", "writer")}),
    ("kairos-qa", {("router", "math_expert"), ("router", "humanities_expert")}),
])
def test_chains_follow_their_variants(traces, family, shapes):
    seen = {tuple(r.agent for r in g) for g in traces[family].values()}
    assert seen == shapes
    for g in traces[family].values():
        assert all(r.depends_on == ([r.stage_index - 1] if r.stage_index > 1 else []) for r in g)


def test_chat_turns_are_a_chain_of_real_turns(traces):
    for g in traces["chat"].values():
        assert 1 <= len(g) <= 8 and all(r.agent == "assistant" for r in g)
        assert g[0].item["real_output_tokens"][0] > 0


def test_sql_dag_fans_out_then_loops_then_evaluates(traces):
    for g in traces["sql"].values():
        agents = [r.agent for r in g]
        k, rounds = g[0].item["candidates"], g[0].item["correction_rounds"]
        assert agents == ["schema_linker"] + ["sql_writer"] * k + ["sql_fixer"] * rounds + ["evaluator"]
        assert 2 <= k <= 5 and 0 <= rounds <= 10
        writers = g[1:1 + k]
        assert all(r.depends_on == [1] for r in writers)                      # parallel fan-out
        after_writers = g[1 + k]
        assert after_writers.depends_on == list(range(2, k + 2))              # joins all candidates
        for r in g[2 + k:]:
            assert r.depends_on == [r.stage_index - 1]                        # sequential afterwards


def test_kairos_code_feedback_loop_is_bounded(traces):
    for g in traces["kairos-code"].values():
        agents = [r.agent for r in g]
        loops = g[0].item["loops"]
        assert 1 <= loops <= 3 and agents == ["coder", "tester"] * loops


def test_remaining_tokens_sum_current_and_later_stages(traces):
    g = next(g for g in traces["code"].values() if len(g) == 4)
    m = MODELS[0]
    assert remaining_output_tokens(g, 1, m) == sum(r.output_tokens[m] for r in g)
    assert remaining_output_tokens(g, 4, m) == g[3].output_tokens[m]


def test_trace_roundtrip_and_malformed_line(tmp_path):
    records = generate("kairos-report", 5, seed=1, models=MODELS)
    path = tmp_path / "t.jsonl"
    write_jsonl(records, path)
    assert [r.to_json() for r in read_jsonl(path)] == [r.to_json() for r in records]
    path.write_text(path.read_text() + '{"program_id": 1}\n')
    with pytest.raises(ValueError, match=f":{len(records) + 1}:"):
        list(read_jsonl(path))


def test_published_accuracy_is_reproduced():
    groups = programs(generate("math", 400, seed=5, models=MODELS)).values()
    acc = {m: statistics.mean(g[0].correct[m] for g in groups) for m in MODELS}
    assert acc["qwen2.5-1.5b-instruct"] == pytest.approx(0.552, abs=0.06)
    assert acc["qwen2.5-14b-instruct"] == pytest.approx(0.800, abs=0.06)


def test_harder_items_fail_more():
    groups = list(programs(generate("math", 400, seed=6, models=MODELS)).values())
    easy = [g[0].correct[MODELS[0]] for g in groups if g[0].item["level"] == "easy"]
    hard = [g[0].correct[MODELS[0]] for g in groups if g[0].item["level"] == "hard"]
    assert statistics.mean(easy) > statistics.mean(hard) + 0.1


def test_unknown_family_and_model_are_rejected():
    with pytest.raises(ValueError, match="family"):
        generate("poetry", 5, seed=0)
    with pytest.raises(ValueError, match="model"):
        generate("code", 5, seed=0, models=("gpt-17",))


def test_each_outcome_carries_the_probability_it_was_drawn_with_and_what_the_prompt_shows_of_it():
    groups = list(programs(generate("code", 600, seed=7, models=MODELS)).values())
    firsts = [g[0] for g in groups]
    for group in groups:
        for record in group:
            assert record.solve_probability == group[0].solve_probability   # the program's, on every stage
            assert all(0.0 < p < 1.0 for p in [*record.solve_probability.values(),
                                               *record.visible_solve_probability.values()])
    for m in MODELS:  # the outcomes are drawn with the probabilities, whose mean is the published accuracy
        drawn = statistics.mean(r.correct[m] for r in firsts)
        assert drawn == pytest.approx(statistics.mean(r.solve_probability[m] for r in firsts), abs=0.05)
    # the full probability tells outcomes apart better than what the prompt shows of it, and both better
    # than chance: the ceilings are ordered
    small = MODELS[0]
    outcome = [float(r.correct[small]) for r in firsts]
    full = statistics.correlation([r.solve_probability[small] for r in firsts], outcome)
    visible = statistics.correlation([r.visible_solve_probability[small] for r in firsts], outcome)
    assert full > visible > 0.0
