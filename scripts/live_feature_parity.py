"""The QRF's features and predictions of the live race's agent calls as the door sends them, beside the
twin's rows from the trace (docs/vllm-sim.md, "The cause: the live predictor read the harness's filler"),
and each difference alone: the calls as sent with the trace's system-prompt count, or with its text.

    python scripts/live_feature_parity.py [--programs 120]

The live door's calls (``hetflow.bench.doors.sent_feature_row``: each part its own text cut to the trace's
token count, the system prompt a system message) against the twin's QRF rows
(``predictor_svc.training.examples``: the trace's system prompt and texts); before 3071cc7 every part went
as user text, and before 0f913a4 as filler words. Prints the ratio of the two predictions per call and one
call's features side by side.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from hetflow.bench.doors import predictor_dir_for, sent_feature_row
from hetflow.bench.prompts import PromptText, part_texts
from hetflow.core.features import PredictItem
from hetflow.core.trace import programs
from hetflow.workloads.generate import generate
from predictor_svc.predictors import build_predictor
from predictor_svc.training import examples
from simulator.signals import UPPER_QUANTILE

MODEL = "qwen2.5-7b-instruct"
RATE_PER_S = 0.8724061861322062


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", type=int, default=120, help="the trace's first programs (seed 1)")
    args = p.parse_args()
    records = [r for r in generate("agent", 1500, 1, [MODEL], rate_per_s=RATE_PER_S)
               if int(r.program_id.rsplit("-", 1)[1]) < args.programs]
    text = PromptText()
    texts = {program_id: part_texts(program) for program_id, program in programs(records).items()}
    as_sent = [sent_feature_row(r, MODEL, text, texts[r.program_id]) for r in records]
    by_key = {(e.program_id, e.row.stage_index): e.row for e in examples(records, [MODEL])}
    from_trace = [by_key[(r.program_id, r.stage_index)] for r in records]
    predictor = build_predictor({"kind": "qrf", "artifact": str(predictor_dir_for([MODEL])), "models": [MODEL]})

    def medians(rows: list) -> list[float]:
        return [p.median_tokens for p in predictor.predict_batch([PredictItem(row, (UPPER_QUANTILE,)) for row in rows])]

    twin = medians(from_trace)
    for name, rows in (("as sent", as_sent),
                       ("as sent with the trace's system-prompt count",
                        [replace(a, system_prompt_tokens=t.system_prompt_tokens) for a, t in zip(as_sent, from_trace)]),
                       ("as sent with the trace's user prompt",
                        [replace(a, user_prompt=t.user_prompt, user_prompt_tokens=t.user_prompt_tokens)
                         for a, t in zip(as_sent, from_trace)])):
        ratios = sorted(a / b for a, b in zip(medians(rows), twin) if b > 0)
        print(f"{name} / from the trace, {len(ratios)} calls' median remaining tokens: median "
              f"{statistics.median(ratios):.3f}, mean {statistics.mean(ratios):.3f}, "
              f"P10 {ratios[len(ratios) // 10]:.3f}, P90 {ratios[9 * len(ratios) // 10]:.3f}")
    for field in ("system_prompt_tokens", "user_prompt_tokens", "input_tokens", "stage_index"):
        print(f"  {field}: as sent {getattr(as_sent[5], field)}, from the trace {getattr(from_trace[5], field)}")
    print(f"  user_prompt as sent: {as_sent[5].user_prompt[:60]!r}")
    print(f"  user_prompt from the trace: {from_trace[5].user_prompt[:60]!r}")


if __name__ == "__main__":
    main()
