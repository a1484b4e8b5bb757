"""python -m router_svc --config STACK.yaml"""

from router_svc.app import build
from router_svc.config import from_stack
from hetflow.runtime.entry import service_main


def main(argv: list[str] | None = None) -> None:
    service_main("router_svc", "hetflow semantic router", from_stack, build, argv)


if __name__ == "__main__":
    main()
