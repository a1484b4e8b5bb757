"""hetflow's queue order survives the trip into vLLM's int priority (no vLLM needed)."""

import random

from engine_svc.backends.vllm_backend import vllm_priority
from hetflow.core.engine.request import NORMAL_LEVEL, PROMOTED_LEVEL
from tests.factories import request


def test_the_priority_order_is_kept_across_signs_and_magnitudes():
    rng = random.Random(1)
    priorities = sorted({0.0, -0.5, 3.0, 1e-9, 2e9, 1.7e9 + 0.25, -1e12, 42.0,
                         *(rng.uniform(-1e6, 1e10) for _ in range(200))})
    ints = [vllm_priority(request(priority=p)) for p in priorities]
    assert ints == sorted(ints) and len(set(ints)) == len(ints)
    assert all(0 <= i < 2**63 for i in ints)                              # vLLM sends it as an int64


def test_a_promoted_request_comes_before_every_normal_one():
    promoted, normal = request(priority=1e12), request(priority=-1e12)
    promoted.starvation_level, normal.starvation_level = PROMOTED_LEVEL, NORMAL_LEVEL
    assert vllm_priority(promoted) < vllm_priority(normal)
