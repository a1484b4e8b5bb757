"""The balancer's front switches its cascade on a reload (SIGHUP); a config that does not build, however it
fails, leaves the current cascade serving and the signal's handler standing."""

from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from balancer_svc.front import Front
from hetflow.core.cascade.config import CascadeConfig, JudgeSpec

CASCADE = CascadeConfig(("small", "large"), (70.0,), JudgeSpec(kind="llm", model="large"))


def config(cascade: CascadeConfig | None) -> BalancerConfig:
    return BalancerConfig(monitor_address="127.0.0.1:1", cascade=cascade)


async def test_a_reload_takes_the_new_cascade_and_a_config_that_does_not_build_leaves_it():
    front = Front(Dispatcher(config(None)), None)
    front.reload(lambda: config(CASCADE))
    assert front.cascade_config() == CASCADE

    def unreadable() -> BalancerConfig:
        raise TypeError("float() argument must be a string or a real number, not 'list'")

    missing_judge = CascadeConfig(("small", "large"), (70.0,), JudgeSpec(kind="learned", artifact="/nonexistent"))
    for read in (unreadable, lambda: config(missing_judge)):
        front.reload(read)
        assert front.cascade_config() == CASCADE
    front.reload(lambda: config(None))
    assert front.cascade_config() is None
