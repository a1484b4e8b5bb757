"""Chimera's model choice (Algorithm 1, lines 2-26; section 3.6): the slack rule.

1. A program that already has a model keeps it (line 2, 24-26: program affinity).
2. Otherwise estimate each model's time-to-last-token from in-flight predicted tokens
   (lines 7-11):  L[m] = P_m * Pi[m].decode_ms_per_token / Pi[m].max_batch_size,
   P_m = sum of I[m]. With several replicas of m, P_m sums over them, Pi[m].max_batch_size is the sum
   of their batch sizes and decode_ms_per_token their mean (our generalisation to replicas).
3. m_fast = argmin L (line 12). Walk models by descending confidence q[m]; the first with
   L[m] <= (1 + tau) * L_fast (line 18) replaces m_fast if q[m] >= q* + delta_s (line 19); stop there.

``open_slots_first`` (hetflow's extension, issue 35): L[m] is a fluid drain time at full-batch speed,
Pi[m].decode_ms_per_token / Pi[m].max_batch_size per token. It holds once m's batch is full; a model
whose engine has a free batch slot takes the call into its running batch at once, at far less than
that rate's cost. So when some models have an engine with a free slot and others do not, the rule runs
among the models with one. On a cluster of a fast small model and a slow large one, plain L keeps the
large model's batch a fifth full while the small model's queue grows (docs/history/results-log.md, "The code
sweep's model stage").

``margin_per_ktoken`` (kappa; hetflow's extension, issue 62): line 19's margin grows with the work the call
would bring to the more confident model, delta_s + kappa * Y_m / 1000 with Y_m the predictor's median for
the call on m (the remaining output tokens of its program, under the priority rules that predict the
workflow's, hetflow's default among them). Chimera charges every call the same margin, so the larger
model's capacity goes to whichever calls clear it, long or short; charged by predicted tokens, a call
goes when its confidence gained per token clears kappa (at delta_s 0 exactly the greedy order of a
knapsack, Dantzig 1957; above it, net of the fixed margin), so the same share of the larger model's
tokens buys more task score and fewer long programs wait on the slow model. kappa = 0 is Chimera's rule.

``slack_into_free_engines`` (hetflow's extension, issue 61): the walk (lines 17-22) takes a model other
than the fastest only where one of its engines has a free batch slot, no call waiting for one (none
reported, none dispatched since its report) and KV for the call: its prompt and predicted output beside
what the engine holds, its pending prefills and its in-flight calls' predicted outputs (an upper bound on
their growth; without it the calls the slack sent grew into KV the engine had given away and it
preempted: docs/results.md, "The slack spent only on engines with room"). The slack then buys quality
while the more confident model has room and stops once its engines queue, whatever tau says: on a pool
whose slower model is its bottleneck a fixed tau queues calls there (docs/results.md, "ShareGPT chains on
the hetero pool").
"""

from __future__ import annotations

from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.errors import Unavailable
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, ModelPicker, PolicyStore, Prediction
from hetflow.core.policies.scorers.program_home_with_room import has_room
from hetflow.core.snapshot import ClusterSnapshot, EngineView


def ttlt_ms(snapshot: ClusterSnapshot) -> dict[str, float]:
    """L[m] per model with a healthy engine (Chimera Algorithm 1, lines 7-11)."""
    out = {}
    for model in snapshot.healthy_models():
        engines = snapshot.healthy_engines(model)
        in_flight_tokens = sum(e.in_flight_tokens for e in engines)                 # P_m, line 10
        decode_ms_per_token = sum(e.decode_ms_per_token for e in engines) / len(engines)
        max_batch_size = sum(e.max_batch_size for e in engines)
        out[model] = in_flight_tokens * decode_ms_per_token / max_batch_size         # line 11
    return out


def with_open_slots(snapshot: ClusterSnapshot, ttlt: Mapping[str, float]) -> dict[str, float]:
    """``ttlt`` without the models none of whose healthy engines has a free batch slot (in-flight calls
    below Pi[m].max_batch_size), when some model has one; unchanged when all or none have."""
    open_models = {m for m in ttlt if any(e.in_flight_requests < e.max_batch_size
                                          for e in snapshot.healthy_engines(m))}
    if not open_models:
        return dict(ttlt)
    return {m: load for m, load in ttlt.items() if m in open_models}


def is_free(engine: EngineView, call_kv_tokens: float) -> bool:
    """A free batch slot, nothing waiting for one, and KV for ``call_kv_tokens`` beside what the engine holds,
    its pending prefills and its in-flight calls' predicted outputs (an engine of unknown KV size: slots only)."""
    return (engine.in_flight_requests < engine.max_batch_size and engine.waiting == 0
            and engine.dispatched_since_report == 0
            and has_room(engine, call_kv_tokens + engine.in_flight_tokens, kv_fraction=1.0))


def with_free_engines(call: LlmCall, snapshot: ClusterSnapshot, ttlt: Mapping[str, float],
                      confidence: Mapping[str, float], predictions: Mapping[str, Prediction]) -> dict[str, float]:
    """``ttlt`` without the models, line 12's fastest apart, none of whose healthy engines ``is_free`` for the
    call: its prompt and its output as predicted on that model (``slack_into_free_engines``)."""
    m_fast = fastest(confidence, ttlt)
    call_kv_tokens = {m: call.input_tokens + call_output_tokens(call, predictions.get(m)) for m in ttlt}
    free = {m for m in ttlt if any(is_free(e, call_kv_tokens[m]) for e in snapshot.healthy_engines(m))}
    return {m: load for m, load in ttlt.items() if m == m_fast or m in free}


def within_slack(ttlt: Mapping[str, float], latency_slack: float) -> list[str]:
    """The models line 18 can take: L[m] <= (1 + tau) * L_fast."""
    l_fast = min(ttlt.values(), default=0.0)
    return [m for m, load in ttlt.items() if load <= (1.0 + latency_slack) * l_fast]


def fastest(confidence: Mapping[str, float], ttlt: Mapping[str, float]) -> str:
    """m_fast = argmin L (Algorithm 1, line 12); ties to the higher q, then the name."""
    return min(ttlt, key=lambda m: (ttlt[m], -confidence.get(m, 0.0), m))


def slack_rule(confidence: Mapping[str, float], ttlt: Mapping[str, float], latency_slack: float,
               confidence_margin: float, work_margin: Mapping[str, float] | None = None) -> tuple[str, str]:
    """Algorithm 1, lines 12-22. Returns (m*, rule). Ties: lower L, then higher q, then name.
    ``work_margin``: each model's addition to the margin for this call (``margin_per_ktoken``)."""
    models = sorted(ttlt)
    m_fast = fastest(confidence, ttlt)                                                # line 12
    l_fast = ttlt[m_fast]                                                             # line 13
    m_star, q_star = m_fast, confidence.get(m_fast, 0.0)                              # lines 15-16
    for m in sorted(models, key=lambda m: (-confidence.get(m, 0.0), ttlt[m], m)):    # line 17
        if ttlt[m] <= (1.0 + latency_slack) * l_fast:                                 # line 18
            margin = confidence_margin + (work_margin or {}).get(m, 0.0)
            if confidence.get(m, 0.0) >= q_star + margin and m != m_fast:                # line 19
                return m, "slack:more-confident-within-slack"                         # lines 20-21
            break                                                                     # line 22
    return m_star, "slack:fastest"


@plugin("model-picker", "chimera-slack")
class ChimeraSlack(ModelPicker):
    needs_router = True
    program_affinity = True

    def __init__(self, latency_slack: float = 0.5, confidence_margin: float = 0.05,
                 open_slots_first: bool = False, margin_per_ktoken: float = 0.0,
                 per_workflow: Mapping[str, Mapping[str, float]] | None = None,
                 slack_into_free_engines: bool = False) -> None:
        """``per_workflow``: workflow -> its own ``latency_slack`` (tau), ``confidence_margin`` (delta_s) and
        ``margin_per_ktoken`` (kappa) for the calls of that workflow (the call's ``workflow``), each chosen
        from that family's sweeps; the top-level values for every other call and for any a workflow leaves
        out."""
        top = {"latency_slack": latency_slack, "confidence_margin": confidence_margin,
               "margin_per_ktoken": margin_per_ktoken}
        self.settings: tuple[float, float, float] = (latency_slack, confidence_margin, margin_per_ktoken)
        self.per_workflow: dict[str, tuple[float, float, float]] = {}
        for workflow, params in (per_workflow or {}).items():
            unknown = set(params) - set(top)
            if unknown:
                raise ValueError(f"per_workflow[{workflow!r}] takes {', '.join(top)}, not {sorted(unknown)}")
            merged = {**top, **params}
            self.per_workflow[str(workflow)] = (float(merged["latency_slack"]), float(merged["confidence_margin"]),
                                                float(merged["margin_per_ktoken"]))
        if min([*self.settings, *(v for values in self.per_workflow.values() for v in values)]) < 0:
            raise ValueError("latency_slack (tau), confidence_margin (delta_s) and margin_per_ktoken (kappa) must "
                             "be >= 0, per_workflow too")
        self.open_slots_first = bool(open_slots_first)
        self.slack_into_free_engines = bool(slack_into_free_engines)

    def reads_confidence(self, call: LlmCall, snapshot: ClusterSnapshot) -> bool:
        """Only when two models or more lie within the slack of the fastest: with one, the walk (lines
        17-22) stops at the fastest model whatever the confidences, so the router's answer cannot change
        the pick (at no slack, only models tied with the fastest, such as idle ones, need it)."""
        ttlt = ttlt_ms(snapshot)
        among = with_open_slots(snapshot, ttlt) if self.open_slots_first else ttlt
        latency_slack = self.per_workflow.get(call.workflow.workflow, self.settings)[0]
        return len(within_slack(among, latency_slack)) > 1

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        ttlt = ttlt_ms(snapshot)
        latency_slack, confidence_margin, per_ktoken = self.per_workflow.get(call.workflow.workflow,
                                                                             self.settings)
        params = {"latency_slack": latency_slack, "confidence_margin": confidence_margin,
                  "margin_per_ktoken": per_ktoken, "open_slots_first": float(self.open_slots_first),
                  "slack_into_free_engines": float(self.slack_into_free_engines)}
        if not ttlt:
            raise Unavailable("no healthy engine serves any model")
        if snapshot.program_model and snapshot.program_model in ttlt:                # line 2, 26
            return Choice(snapshot.program_model, "program-affinity", confidence, ttlt, params)
        among = with_open_slots(snapshot, ttlt) if self.open_slots_first else ttlt
        walked = (with_free_engines(call, snapshot, among, confidence, predictions) if self.slack_into_free_engines
                  else among)
        work_margin = ({m: per_ktoken * predictions[m].median_tokens / 1e3 for m in walked}
                       if per_ktoken else None)
        model, rule = slack_rule(confidence, walked, latency_slack, confidence_margin, work_margin)
        if len(walked) < len(among):
            rule = f"free-engines;{rule}"
        if len(among) < len(ttlt):
            rule = f"open-slots;{rule}"
        if snapshot.program_model:
            rule = f"affinity-model-unavailable;{rule}"
        if work_margin:  # the receipt shows what each model's confidence had to clear beyond delta_s
            params.update({f"work_margin:{m}": v for m, v in work_margin.items()})
        return Choice(model, rule, confidence, ttlt, params)
