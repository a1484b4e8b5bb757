"""``hetflow replan``: re-planning a running cascade on workload shift (Cascadia 4.4), off the request path.

1. Read the balancer's live window (``Balancer.Workload``: the arrival rate and a uniform sample of calls
   with c_1's lengths and grade) and compare it with the workload the plan was made for (``shift``).
2. On a shift, profile the sampled prompts on every model type of the cascade through the balancer
   (pinned calls, served like any other) and grade each answer with the stack's judge (an LLM judge's
   call pinned to its model, or the learned judge here), as Cascadia profiles its subsample on every
   model (3.3, footnote 3).
3. Plan again at the live rate on that sample, write the new stack config, and list the rollout from
   the running engines to the new ones, one engine at a time (``rollout``). The steps are printed for
   an operator (or ``hetflow compose``/``kube``) to carry out; serving goes on meanwhile on the current
   deployment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from hetflow.client import HetflowClient, build_request
from hetflow.core.cascade.config import CascadeConfig
from hetflow.core.cascade.judge_prompt import judge_messages, parse_grade
from hetflow.core.cascade.learned_scorer import LearnedScorer
from hetflow.core.engine.profile import load_profile
from hetflow.core.workload_window import PROFILING_WORKFLOW
from hetflow.planner.cli import PlanConfig, load, mean_quality, profiled_sample, run, summary, write_stack
from hetflow.planner.replan import Replica, Rollout, WorkloadProfile, rollout, shift
from hetflow.planner.routing import SampledRequest
from hetflow.planner.stack import stack_config
from hetflow.runtime.config import load_stack
from hetflow.runtime.security import stack_security
from hetflow.v1 import balancer_pb2

PROFILE_MAX_TOKENS = 512
"""The longest answer a profiling call may give."""



def live_profile(reply: balancer_pb2.WorkloadReply) -> WorkloadProfile:
    return WorkloadProfile.of(reply.rate_per_s, [(s.input_tokens, s.output_tokens) for s in reply.samples],
                              [s.first_grade for s in reply.samples if s.HasField("first_grade")])


def planned_profile(rate_per_s: float, sample: Sequence[SampledRequest], first_model: str) -> WorkloadProfile:
    return WorkloadProfile.of(rate_per_s, [(r.input_tokens[first_model], r.output_tokens[first_model]) for r in sample],
                              [r.score[first_model] for r in sample])


async def profile_prompts(client: HetflowClient, prompts: Sequence[str], cascade: CascadeConfig,
                          scorer: LearnedScorer | None, concurrency: int = 8) -> list[SampledRequest]:
    """Each prompt answered by every model type and graded by the cascade's judge, ``concurrency`` prompts
    at a time; a prompt some model could not answer or the judge could not grade is left out."""
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> SampledRequest | None:
        async with gate:
            lengths_in, lengths_out, scores = {}, {}, {}
            for model in cascade.models:
                answer = await client.complete(build_request(prompt=prompt, max_tokens=PROFILE_MAX_TOKENS,
                                                             model_pin=model, workflow=PROFILING_WORKFLOW))
                lengths_in[model], lengths_out[model] = answer.prompt_tokens, answer.output_tokens
                if scorer is not None:
                    scores[model] = scorer.grade(prompt, model, answer.output_tokens)
                    continue
                verdict = await client.complete(build_request(judge_messages(prompt, answer.text),
                                                              max_tokens=cascade.judge.max_tokens, temperature=0.0,
                                                              model_pin=cascade.judge.model,
                                                              workflow=PROFILING_WORKFLOW))
                try:
                    scores[model] = parse_grade(verdict.text)
                except ValueError:
                    return None
            return SampledRequest(lengths_in, lengths_out, scores)

    return [r for r in await asyncio.gather(*(one(p) for p in prompts)) if r is not None]


def running_replicas(raw: Mapping[str, Any]) -> dict[str, Replica]:
    """The stack config's engines as replicas (name -> model and parallelism)."""
    out = {}
    for engine in raw.get("engines", []):
        vllm = engine.get("vllm") or {}
        model = engine.get("model") or load_profile(engine.get("profile", "")).model
        out[engine["name"]] = Replica(model, int(vllm.get("tensor_parallel_size", 1)),
                                      int(vllm.get("pipeline_parallel_size", 1)))
    return out


def served_models(raw: Mapping[str, Any]) -> list[str]:
    """The models a stack's balancer routes to: its cascade's, or every engine's model."""
    cascade = (raw.get("balancer", {}).get("cascade") or {}).get("models")
    return list(cascade) if cascade else sorted({r.model for r in running_replicas(raw).values()})


def plan_rollout(running_stack: Mapping[str, Any], new_stack: Mapping[str, Any], gpu_budget: int) -> Rollout:
    return rollout(running_replicas(running_stack), list(running_replicas(new_stack).values()), gpu_budget,
                   served_models(running_stack), served_models(new_stack))


async def replan(cfg: PlanConfig, running_stack: Mapping[str, Any], balancer: str, scorer: LearnedScorer | None,
                 force: bool = False) -> tuple[dict[str, Any], Rollout | None]:
    """What ``hetflow replan`` reports (module docstring): the shift, and on one the new plan, its stack
    and the rollout (None without a shift)."""
    cascade = CascadeConfig.from_mapping(running_stack["balancer"]["cascade"])
    planned_sample = profiled_sample(cfg)
    async with HetflowClient(balancer, security=stack_security(running_stack, "operator")) as client:
        reply = await client.stub.Workload(balancer_pb2.WorkloadRequest())
        live = live_profile(reply)
        planned = planned_profile(cfg.workload.rate_per_s, planned_sample, cfg.cascade[0])
        reasons = shift(planned, live)
        report: dict[str, Any] = {"planned": dataclasses.asdict(planned), "live": dataclasses.asdict(live),
                                  "shift": reasons}
        if not reasons and not force:
            return report, None
        sample = await profile_prompts(client, [s.prompt for s in reply.samples], cascade, scorer)
    if not sample:
        raise ValueError("no sampled call could be profiled on every model type and graded")
    live_cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, rate_per_s=live.rate_per_s))
    result, _ = run(live_cfg, sample)
    new_stack = stack_config(result, cfg.stack, mean_quality(sample), dataclasses.asdict(cfg.judge_spec))
    steps = plan_rollout(running_stack, new_stack, sum(int(n) for n in cfg.gpus.values()))
    report.update(profiled=len(sample), plan=summary(result), stack=new_stack,
                  rollout=[dataclasses.asdict(s) for s in steps.steps], blocked=steps.blocked)
    return report, steps


def main(config: Path, stack: Path, balancer: str, stack_dir: Path | None, force: bool, apply: bool = False) -> int:
    cfg = load(config)
    running = load_stack(stack, environ={})
    scorer = None
    if cfg.judge_spec.kind == "learned":
        from balancer_svc import judge_artifact

        scorer = judge_artifact.load(cfg.judge_spec.artifact, cfg.cascade)
    report, steps = asyncio.run(replan(cfg, running, balancer, scorer, force))
    print(json.dumps({k: v for k, v in report.items() if k != "stack"}, indent=2, default=str))
    if "stack" in report and stack_dir is not None:
        write_stack(report["stack"], stack_dir)
    if apply and steps is not None:
        if steps.blocked:
            raise ValueError(f"the rollout is blocked, nothing applied: {'; '.join(steps.blocked)}")
        from hetflow.planner.apply import apply as apply_steps

        asyncio.run(apply_steps(stack, report["stack"], steps.steps))
    return 0
