"""python -m monitor_svc --config STACK.yaml"""

from hetflow.runtime.entry import service_main
from monitor_svc.app import build
from monitor_svc.config import from_stack


def main(argv: list[str] | None = None) -> None:
    service_main("monitor_svc", "hetflow activity monitor", from_stack, lambda cfg: build(cfg)[1], argv)


if __name__ == "__main__":
    main()
