"""Build a tiny Llama-style model directory that vLLM runs with ``load_format="dummy"``.

No weights are downloaded: vLLM initialises random weights from ``config.json``. The tokenizer
is a byte-level BPE trained here with ``tokenizers`` on text from Python's own standard library,
so the directory is reproducible offline.
"""

from __future__ import annotations

import argparse
import json
import os
import sysconfig
from pathlib import Path

DEFAULT_DIR = Path(os.environ.get("HETFLOW_CACHE", Path.home() / ".cache" / "hetflow")) / "models" / "tiny-llama"
VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,  # the CPU attention kernels need head_dim >= 32
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB_SIZE,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _training_text(max_files: int = 60) -> list[str]:
    """Deterministic corpus: the first ``max_files`` stdlib modules, sorted by name."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py"))[:max_files]
    return [p.read_text(encoding="utf-8", errors="ignore") for p in files]


def build(out_dir: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_text(), trainer=trainer)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": LLAMA_CONFIG["max_position_embeddings"],
        "chat_template": (
            "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
        ),
    }, indent=2))
    (out_dir / "config.json").write_text(json.dumps(LLAMA_CONFIG, indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    if (args.out / "config.json").exists() and not args.force:
        print(f"tiny model already at {args.out}")
        return
    print(f"tiny model written to {build(args.out)}")


if __name__ == "__main__":
    main()
