"""The router's encoder as a budget of its own: CPU per encoded prompt, by family, precision and batch.

    python -m hetflow.bench.encoder_cost --artifact DIR [--families code,math,chat,agent,sql] [--programs 40]

The learned router (``router.kind: minilm-onnx``, Chimera 3.3) encodes a prompt only for a decision whose
model stage reads its confidences; the share of decisions that do is the simulator's
``router_asked_share`` (``hetflow simulate`` and the sweeps' summaries). This measures what one encoded
prompt costs the router service: its scorer's ``score_batch`` (tokenise, cut at the artifact's
``max_length``, pad, one onnxruntime run per micro-batch on one thread), the process's CPU time over the
prompts the router is asked about in each family (each program's first call: the router is asked before a
program has a model), int8 and fp32, one prompt a run and the service's micro-batches of four.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

from hetflow.bench.common import chosen, write
from hetflow.workloads.generate import FAMILIES, generate
from hetflow.workloads.models import DEFAULT_MODELS

PRECISIONS = ("int8", "fp32")
MICRO_BATCHES = (1, 4)


def first_prompts(family: str, programs: int, seed: int) -> list[str]:
    return [r.user_prompt for r in generate(family, programs, seed, DEFAULT_MODELS) if not r.depends_on]


def cpu_ms_per_prompt(scorer: Any, prompts: Sequence[str], rounds: int) -> float:
    """The scorer's CPU time per prompt over ``rounds`` passes of ``prompts`` (after one untimed pass)."""
    scorer.score_batch(list(prompts))
    started = time.process_time()
    for _ in range(rounds):
        scorer.score_batch(list(prompts))
    return (time.process_time() - started) / (rounds * len(prompts)) * 1e3


def measure(artifact: str, families: Sequence[str], programs: int, seed: int, rounds: int) -> list[dict[str, Any]]:
    from router_svc.scorers.onnx_router import OnnxRouterScorer

    models = json.loads((Path(artifact) / "meta.json").read_text())["models"]  # the models it scores
    rows = []
    for precision in PRECISIONS:
        for micro_batch in MICRO_BATCHES:
            scorer = OnnxRouterScorer(artifact, models, precision=precision, threads=1, micro_batch=micro_batch)
            for family in families:
                prompts = first_prompts(family, programs, seed)
                encoded = [scorer.encoder.tokenizer.encode(p) for p in prompts]
                rows.append({"family": family, "precision": precision, "micro_batch": micro_batch,
                             "prompts": len(prompts),
                             "mean_tokens": statistics.fmean(len(e.ids) for e in encoded),
                             "truncated_share": sum(bool(e.overflowing) for e in encoded) / len(encoded),
                             "cpu_ms_per_prompt": cpu_ms_per_prompt(scorer, prompts, rounds)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="a router artifact from `hetflow train router`")
    parser.add_argument("--families", default="code,math,chat,agent,sql")
    parser.add_argument("--programs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over each family's prompts")
    args = parser.parse_args(argv)
    families = chosen(parser, args.families, sorted(FAMILIES), "family")
    rows = measure(args.artifact, families, args.programs, args.seed, args.rounds)
    path = write("encoder_cost", {"command": f"python -m hetflow.bench.encoder_cost --families {args.families} "
                                             f"--programs {args.programs} --seed {args.seed} --rounds {args.rounds}",
                                  "rows": rows})
    print(f"{'family':8s} {'precision':9s} {'batch':>5s} {'prompts':>7s} {'tokens':>7s} {'cut':>5s} "
          f"{'CPU ms/prompt':>13s}")
    for r in rows:
        print(f"{r['family']:8s} {r['precision']:9s} {r['micro_batch']:5d} {r['prompts']:7d} {r['mean_tokens']:7.1f} "
              f"{r['truncated_share']:5.0%} {r['cpu_ms_per_prompt']:13.2f}")
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
