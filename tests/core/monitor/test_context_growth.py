"""Each workflow's context growth per call, for the working-set gate (issue 35)."""

from hetflow.core.monitor.context_growth import ContextGrowth


def test_the_growth_is_the_mean_of_the_prompt_tokens_each_call_added_per_workflow():
    growth = ContextGrowth()
    assert growth.tokens_per_call("agent") == 0.0                  # before any program's second call
    growth.record("agent", previous_prompt_tokens=1000, prompt_tokens=1600)
    growth.record("agent", previous_prompt_tokens=1600, prompt_tokens=1800)
    growth.record("chat", previous_prompt_tokens=500, prompt_tokens=900)
    assert growth.tokens_per_call("agent") == 400.0 and growth.tokens_per_call("chat") == 400.0


def test_a_call_with_a_shorter_prompt_than_its_programs_last_adds_nothing():
    growth = ContextGrowth()
    growth.record("sql", previous_prompt_tokens=3000, prompt_tokens=800)   # a DAG's fresh branch
    growth.record("sql", previous_prompt_tokens=800, prompt_tokens=1000)
    assert growth.tokens_per_call("sql") == 100.0


def test_only_the_most_recently_heard_workflows_are_kept():
    from hetflow.core.monitor.recent import MAX_AGENTS

    growth = ContextGrowth()
    for i in range(MAX_AGENTS + 5):
        growth.record(f"w{i}", previous_prompt_tokens=0, prompt_tokens=10)
    assert growth.tokens_per_call("w0") == 0.0 and growth.tokens_per_call(f"w{MAX_AGENTS + 4}") == 10.0
    assert len(growth._added_tokens_and_calls) == MAX_AGENTS
