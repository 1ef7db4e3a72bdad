"""Host memory before a vLLM engine starts: the vLLM backend's ``load`` (the model described from its
files, :mod:`ctxbench.model.describe`) against the naive way it replaced (the whole model built by
transformers in float32 first), on random-weight checkpoints of two sizes, each measured in a fresh
process (its peak resident set, ``VmHWM``). Weights' values do not matter to memory; their count does.

    python scripts/bench_describe.py            # SmolLM2-135M's shape and Llama-3.2-1B's, bf16 on disk

Prints one table: per shape, parameters, checkpoint size, peak RSS of each way and their ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SHAPES = {
    # HuggingFaceTB/SmolLM2-135M's config.json
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True, rope_theta=100000.0),
    # meta-llama/Llama-3.2-1B's config.json (RoPE scaling left out: memory does not depend on it)
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=64, vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=True, rope_theta=500000.0),
}  # fmt: skip

MEASURE = """
import json, sys
way, path = sys.argv[1], sys.argv[2]
if way == "describe":
    from ctxbench.backends import vllm
    from ctxbench.runner.grid import ModelConfig
    lm = vllm.load(ModelConfig(model=path, backend="vllm", dtype="bfloat16"))
else:
    from ctxbench.backends.hf import load_model as load
    lm = load(path, device="cpu", dtype="float32")  # what the vLLM backend did before
# VmHWM: this process's own peak (ru_maxrss would carry over the parent's, fork + exec)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_mb": int(hwm.split()[1]) / 1024}))
"""


def build(shape: str, folder: Path, tokenizer_from: str) -> int:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape], bos_token_id=1, eos_token_id=2)
    torch.set_default_dtype(torch.bfloat16)
    model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def peak(way: str, folder: Path) -> float:
    proc = subprocess.run([sys.executable, "-c", MEASURE, way, str(folder)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_mb"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args(argv)
    from ctxbench.model.describe import describe

    tokenizer_from = describe("smollm2-135m").checkpoint  # the default model's tokenizer files
    print("| shape | parameters | checkpoint (bf16) | naive: transformers model first | described from files | naive / described |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            folder = Path(tmp) / shape
            n = build(shape, folder, tokenizer_from)
            size = sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 2**30
            naive, described = peak("naive", folder), peak("describe", folder)
            print(f"| {shape} | {n / 1e6:.0f}M | {size:.2f} GiB | {naive:,.0f} MB | {described:,.0f} MB | {naive / described:.1f}x |",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
