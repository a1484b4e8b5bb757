"""A rival preset runs on the live stack: llm-d's default profile sends a program's next call to the
engine that holds its prefix, and the receipt shows every scorer's value per engine."""

from hetflow.client import HetflowClient, build_request
from hetflow.core.presets import apply_to_stack, resolve
from tests.integration.harness import SMALL, stack_config, start_stack


async def test_llm_d_follows_the_prefix_on_the_live_stack_and_explains_it():
    engines = [{"name": "small-0", "profile": f"{SMALL}@a6000"}, {"name": "small-1", "profile": f"{SMALL}@a6000"}]
    stack = await start_stack(apply_to_stack(stack_config(engines), resolve("llm-d")))
    history = "You are a careful coding agent. Read the task, then act. " * 20       # ~1,200 characters
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            first = await client.complete(build_request(prompt=history + "Task: sort a list.", max_tokens=4,
                                                        program_id="p1", want_receipt=True))
            second = await client.complete(build_request(prompt=history + "Task: sort a list. Done step 1.",
                                                         max_tokens=4, program_id="p1", want_receipt=True))
    finally:
        await stack.close()
    assert second.engine_id == first.engine_id
    engine_stage = second.receipt.stages[1]
    assert engine_stage.plugin == "scored" and set(engine_stage.scorers) == {"queue", "kv-utilization",
                                                                             "prefix-affinity"}
    prefix = dict(engine_stage.scorers["prefix-affinity"].per_engine)
    assert prefix[first.engine_id] > 0.9 and min(prefix.values()) == 0.0
