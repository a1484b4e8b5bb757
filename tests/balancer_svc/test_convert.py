"""Client input to the balancer's call: a deadline already past is rejected, or served best effort
when configured so, never silently dropped."""

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.convert import call_from_proto
from hetflow.client import build_request
from hetflow.core.errors import DeadlineExceeded
from hetflow.core.pipeline import Pipeline
from hetflow.core.policies import Prediction
from hetflow.core.policy_config import PolicyConfig, StageConfig
from tests.factories import engine, snapshot


def test_past_deadline_is_deadline_exceeded_by_default():
    with pytest.raises(DeadlineExceeded, match="deadline_unix_s"):
        call_from_proto(build_request(prompt="hi", max_tokens=4, deadline_unix_s=90.0), 1024, now_unix_s=100.0)


def test_past_deadline_best_effort_is_served_without_it_and_the_receipt_says_so():
    call = call_from_proto(build_request(prompt="hi", max_tokens=4, deadline_unix_s=90.0, program_id="p"), 1024,
                           now_unix_s=100.0, past_deadline="best-effort")
    assert call.workflow.deadline_unix_s == 0.0 and call.workflow.deadline_missed
    pipeline = Pipeline(PolicyConfig(StageConfig("least-load"), StageConfig("least-load"), StageConfig("urgency")))
    outcome = pipeline.decide(call, snapshot(engine("e", "m")), {}, {"m": (Prediction(10), "")}, False)
    priority = next(s for s in outcome.stages if s.stage == "priority")
    assert priority.choice.rule.startswith("deadline-passed:best-effort") and "no-deadline" in priority.choice.rule


def test_unknown_past_deadline_mode_is_refused():
    with pytest.raises(ValueError, match="past_deadline"):
        BalancerConfig(past_deadline="ignore")
