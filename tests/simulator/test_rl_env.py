"""The RL router's environment: no action holds the head of the queue and a later action releases it;
an episode ends with every request finished, under round robin and under the guidance's best instance."""

from hetflow.core.engine.profile import EngineSpec, load_profile
from simulator.rl_env import RoutedRequest, RoutingEnv

PROFILE = load_profile("qwen2.5-1.5b-instruct@a6000")
ENGINES = [EngineSpec(f"e{i}", PROFILE.model, PROFILE) for i in range(2)]


def requests(n=12):
    return [RoutedRequest(f"r{i}", arrival_s=0.01 * i, prompt_tokens=100 + 50 * (i % 3),
                          output_tokens=20 + 10 * (i % 4), predicted_decode_tokens=20 + 10 * (i % 4))
            for i in range(n)]


def test_no_action_holds_the_request_and_a_later_action_releases_it():
    env = RoutingEnv(ENGINES, requests(1))
    no_action = env.actions - 1
    for _ in range(5):
        state, _, done = env.step(no_action)
        assert not done and len(env.queue) == 1 and state[1] == 1.0  # still next in the queue
    env.step(0)
    assert not env.queue and env.engines[0].scheduler.running
    while not env.done:
        env.step(no_action)
    assert env.latencies_s()["r0"] >= 5 * env.step_s  # it waited at the router


def run(env, choose):
    total, state, done = 0.0, env.reset(), False
    while not done:
        state, r, done = env.step(choose(env))
        total += r
    return total


def test_an_episode_finishes_every_request_under_round_robin_and_the_least_disturbed_instance():
    env = RoutingEnv(ENGINES, requests())
    turn = iter(range(10**6))
    run(env, lambda e: next(turn) % 2)
    assert env.done and len(env.latencies_s()) == 12 and all(t > 0 for t in env.latencies_s().values())

    def least_disturbed(e):
        if not e.queue:
            return e.actions - 1
        mixes = e.mixing(e.queue[0])
        return max(range(len(mixes)), key=lambda i: mixes[i])

    run(env, least_disturbed)
    assert env.done and len(env.latencies_s()) == 12
