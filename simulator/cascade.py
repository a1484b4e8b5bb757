"""The simulated cascade's judges: the LLM judge's grade from the modelled judge (its call runs on an
engine of the judge's model, so its time and load are simulated), or the learned scorer's."""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.core.cascade.config import CascadeConfig
from hetflow.core.cascade.judge_prompt import JUDGE_PROMPT_TOKENS
from hetflow.core.cascade.learned_scorer import LearnedScorer
from hetflow.core.cascade.modelled_judge import JUDGE_AGREEMENT, judge_grade
from hetflow.core.trace import StageRecord


@dataclass(frozen=True)
class SimCascade:
    config: CascadeConfig
    judge_seed: int = 0
    judge_agreement: float = JUDGE_AGREEMENT
    judge_prompt_tokens: int = JUDGE_PROMPT_TOKENS
    scorer: LearnedScorer | None = None
    """The learned judge (``config.judge.kind == "learned"``)."""
    outside_judge_s: float | None = None
    """An LLM judge outside the cluster, as Cascadia's GPT-4o (4.1; 0.27 s a grade on average, footnote 4):
    its grade comes this long after the answer and loads no engine. None: the judge's call runs on an
    engine of ``config.judge.model``."""

    def __post_init__(self) -> None:
        if self.config.judge.kind == "learned" and self.scorer is None:
            raise ValueError("a simulated cascade with a learned judge needs its scorer")

    def judge_grade(self, record: StageRecord, model: str) -> float:
        """The LLM judge's 0-100 grade of ``model``'s answer to the call: the modelled judge's, keyed as
        the planner's sample is, so the thresholds it planned meet the grades they were planned on."""
        return judge_grade(record.correct[model], record.program_id, record.stage_index, model, self.judge_seed,
                           judge_agreement=self.judge_agreement)

    def learned_grade(self, record: StageRecord, model: str, answer_tokens: int) -> float:
        assert self.scorer is not None
        return self.scorer.grade(record.user_prompt, model, answer_tokens)
