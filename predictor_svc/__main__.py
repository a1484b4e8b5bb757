"""python -m predictor_svc --config STACK.yaml"""

from predictor_svc.app import build
from predictor_svc.config import from_stack
from hetflow.runtime.entry import service_main


def main(argv: list[str] | None = None) -> None:
    service_main("predictor_svc", "hetflow length predictor", from_stack, build, argv)


if __name__ == "__main__":
    main()
