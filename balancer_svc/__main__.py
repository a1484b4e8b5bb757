"""python -m balancer_svc --config STACK.yaml"""

from balancer_svc.app import build
from balancer_svc.config import from_stack
from hetflow.runtime.entry import service_main


def main(argv: list[str] | None = None) -> None:
    service_main("balancer_svc", "hetflow load balancer", from_stack, build, argv)


if __name__ == "__main__":
    main()
