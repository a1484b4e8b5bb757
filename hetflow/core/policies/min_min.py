"""Min-min (load-balancer paper, C.3.3, after Braun et al.): the request goes to the engine where it would
finish first, its finish time the engine's queued work (the in-flight calls' predicted cost, HexGen-Flow's
t_queue) plus its own time alone there from its prompt tokens and "the upper bound of the predicted decode
token buckets" (the prediction's highest quantile). On homogeneous engines this is shortest job first.
A baseline of issue 16. Ties: engine id."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot, EngineView


def decode_upper_tokens(call: LlmCall, prediction: Prediction) -> float:
    """The call's decode length at the highest predicted quantile, else at the median (C.3.3: "the upper
    bound of the predicted decode token buckets"), of the call's own share of the prediction
    (``call_output_tokens``)."""
    upper = prediction.quantile_tokens[max(prediction.quantile_tokens)] if prediction.quantile_tokens \
        else prediction.median_tokens
    return call_output_tokens(call, Prediction(upper))


def own_time_s(engine: EngineView, prompt_tokens: int, decode_tokens: float) -> float:
    if engine.profile is not None:
        return engine.profile.isolated_request_s(prompt_tokens, int(decode_tokens))
    return decode_tokens * engine.decode_ms_per_token / 1e3


@plugin("engine-picker", "min-min")
class MinMin(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        decode = decode_upper_tokens(call, prediction)
        finish = {e.engine_id: e.in_flight_cost_s + own_time_s(e, call.input_tokens, decode) for e in engines}
        best = min(engines, key=lambda e: (finish[e.engine_id], e.engine_id))
        return Choice(best.engine_id, "min-finish-time", scores=finish, params={"decode_upper_tokens": decode})
