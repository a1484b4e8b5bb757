"""python -m engine_svc --config STACK.yaml --name ENGINE"""

from engine_svc.app import build
from engine_svc.config import from_stack
from hetflow.runtime.entry import service_main


def main(argv: list[str] | None = None) -> None:
    service_main("engine_svc", "hetflow engine service", from_stack, lambda cfg: build(cfg)[1], argv, named=True)


if __name__ == "__main__":
    main()
