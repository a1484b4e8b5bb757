"""The RL router's policy file: the trained Q-network (C.10.3) with what it was trained for, written by
``hetflow train rl`` and read by the balancer's ``rl-router`` engine picker.

A network's inputs and outputs are tied to its engines: 6 state values and one action per instance, in
a fixed order. The file therefore names the engines (ids and model), the decode buckets, the step and the
context window the state was normalised by; ``load`` refuses a file that is not one, is damaged, or
does not match its own network, saying why, and ``check_engines`` a stack whose engines differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from hetflow.core.rl_router.decode_bucket import Buckets
from hetflow.core.rl_router.dqn import q_network
from hetflow.core.rl_router.state import state_dim

FORMAT = "hetflow-rl-router/1"


@dataclass(frozen=True)
class RlPolicy:
    engine_ids: tuple[str, ...]
    """The instances, in the order of the state's rows and of the actions; the last action is none."""
    model: str
    buckets: Buckets
    step_s: float
    """How long a no-action choice holds a call before it is decided again (4.3's 0.02 s)."""
    max_model_len: int
    """The context window the state's prompt length is a share of."""
    hidden: int
    weights: Mapping[str, torch.Tensor]
    trained_on: Mapping[str, Any] = field(default_factory=dict)
    """What it was trained on (workload, rate, episodes, seed), for the operator."""
    architecture: str = "mlp"
    """The Q-network (``hetflow.core.rl_router.dqn.ARCHITECTURES``); files without one hold C.10.3's."""

    @property
    def actions(self) -> int:
        return len(self.engine_ids) + 1

    def network(self) -> nn.Module:
        net = q_network(self.architecture, state_dim(len(self.engine_ids), self.buckets), self.actions, self.hidden)
        net.load_state_dict(dict(self.weights))
        return net.eval()


def save(policy: RlPolicy, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "engine_ids": list(policy.engine_ids), "model": policy.model,
                "bucket_edges_tokens": list(policy.buckets.edges_tokens), "step_s": policy.step_s,
                "max_model_len": policy.max_model_len, "hidden": policy.hidden,
                "architecture": policy.architecture,
                "weights": {k: v.detach().clone() for k, v in policy.weights.items()},
                "trained_on": dict(policy.trained_on)}, path)


def load(path: Path) -> RlPolicy:
    """The policy in ``path``; ValueError naming what is wrong with it otherwise."""
    if not path.is_file():
        raise ValueError(f"RL policy file {path} does not exist")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever torch says of a damaged file, the reason is shown
        raise ValueError(f"RL policy file {path} cannot be read ({type(exc).__name__}: {exc})") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"{path} is not an RL policy file of format {FORMAT!r} (found {found!r})")
    try:
        policy = RlPolicy(tuple(str(e) for e in raw["engine_ids"]), str(raw["model"]),
                          Buckets(tuple(int(b) for b in raw["bucket_edges_tokens"])), float(raw["step_s"]),
                          int(raw["max_model_len"]), int(raw["hidden"]), raw["weights"], raw.get("trained_on", {}),
                          str(raw.get("architecture", "mlp")))
        policy.network()
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"RL policy file {path} is damaged: {exc}") from exc
    if not policy.engine_ids or policy.step_s <= 0:
        raise ValueError(f"RL policy file {path} names no engines or a step of {policy.step_s} s")
    return policy


def check_engines(policy: RlPolicy, engines: Mapping[str, str], path: Path | str = "") -> None:
    """Refuse a stack (engine id -> model) that lacks one of the policy's engines or serves another
    model on it: the network's rows and actions would mean other instances."""
    problems = [f"{e} is not in the stack" if e not in engines else f"{e} serves {engines[e]!r}"
                for e in policy.engine_ids if engines.get(e) != policy.model]
    if problems:
        raise ValueError(f"RL policy {path} was trained for engines {list(policy.engine_ids)} of {policy.model!r}: "
                         + "; ".join(problems))

