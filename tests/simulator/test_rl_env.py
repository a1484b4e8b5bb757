"""The RL router's environment decides as the balancer does: each request when it arrives, and every held
one again at each round; no action holds a request and a later action releases it; an episode ends with
every request finished, under round robin and under the guidance's best instance."""

from dataclasses import replace

from hetflow.core.engine.profile import EngineSpec, load_profile
from simulator.rl_env import RoutedRequest, RoutingEnv

PROFILE = load_profile("qwen2.5-1.5b-instruct@a6000")
ENGINES = [EngineSpec(f"e{i}", PROFILE.model, PROFILE) for i in range(2)]
TIGHT = replace(PROFILE, kv_capacity_tokens=512, max_num_seqs=8)  # one request of 400 tokens at a time


def requests(n=12):
    return [RoutedRequest(f"r{i}", arrival_s=0.01 * i, prompt_tokens=100 + 50 * (i % 3),
                          output_tokens=20 + 10 * (i % 4), predicted_decode_tokens=20 + 10 * (i % 4))
            for i in range(n)]


def test_no_action_holds_the_request_and_a_round_decides_it_again_once_an_instance_has_room():
    env = RoutingEnv(ENGINES, requests(1))
    no_action = env.actions - 1
    for _ in range(5):
        assert env.deciding.request_id == "r0"
        state, _ = env.decide(no_action)
        assert env.deciding is None and "r0" in env.held and state[1] == 0.0  # nothing left to decide now
        state, _, done = env.advance()
        assert not done and state[1] == 1.0  # the round decides it again: both instances have room
    env.decide(0)
    assert not env.held and env.views()[0].in_flight_requests == 1
    while not env.done:
        env.advance()
    assert env.latencies_s()["r0"] >= 5 * env.step_s  # it waited in the hold queue


def test_a_held_request_waits_for_room_undecided_and_a_small_one_passes_it():
    env = RoutingEnv([EngineSpec(f"e{i}", TIGHT.model, TIGHT) for i in range(2)],
                     [RoutedRequest("a", 0.0, 300, 100, 100.0), RoutedRequest("b", 0.0, 300, 100, 100.0),
                      RoutedRequest("large", 0.0, 300, 100, 100.0), RoutedRequest("small", 0.0, 20, 10, 10.0)])
    queue_length = lambda: round(env.state()[0] * 4 * 8)  # noqa: E731 (a share of 4 x the batch size)
    env.decide(0)
    env.decide(1)
    assert queue_length() == 1  # the request decided counts (not held yet)
    assert env.may_hold() and env.offered() == [0, 1, 2]  # "large": neither instance has 400 tokens free
    env.decide(env.no_action)
    assert env.deciding.request_id == "small" and queue_length() == 2  # "small", and "large" held
    assert not env.may_hold() and env.offered() == [0, 1]  # 30 tokens fit
    env.decide(env.no_action)  # held all the same: the environment takes the action it is given
    env.advance()
    assert env.deciding.request_id == "small" and "large" in env.held  # passed over: still no room for it
    assert queue_length() == 2  # held ones are counted once
    env.decide(0)
    assert env.deciding is None and list(env.held.in_order())[0].request_id == "large"


def run(env, choose):
    total, state = 0.0, env.reset()
    while not env.done:
        if env.deciding is not None:
            state, r = env.decide(choose(env))
        elif env.routing_left:
            state, r, _ = env.advance()
        else:
            env.run_to_end()
            r = 0.0
        total += r
    return total


def test_an_episode_finishes_every_request_under_round_robin_and_the_least_disturbed_instance():
    env = RoutingEnv(ENGINES, requests())
    turn = iter(range(10**6))
    run(env, lambda e: next(turn) % 2)
    assert env.done and len(env.latencies_s()) == 12 and all(t > 0 for t in env.latencies_s().values())

    def least_disturbed(e):
        mixes = e.mixing(e.deciding)
        return max(range(len(mixes)), key=lambda i: mixes[i])

    run(env, least_disturbed)
    assert env.done and len(env.latencies_s()) == 12
