"""A first load of the default model from its GGUF file (nothing dequantised yet): ctxbench's ``load``
(transformers' loader, reading the file once: ``ctxbench.model.load._gguf_loading``) against the naive
way, transformers' own loader called as a user would (``AutoConfig``, ``AutoTokenizer`` and
``AutoModelForCausalLM.from_pretrained(..., gguf_file=...)``), each in a fresh process, in one run.
ctxbench's load writes no dequantised copy here (``CTXBENCH_NO_MODEL_CACHE=1``), so each run of it is
a first load; later loads read that copy instead (6.3 s once imports were done, 2-core EPYC, 2026-11-28).

    python scripts/bench_load.py            # one run of each way
    python scripts/bench_load.py --runs 3   # the median of three

Prints the seconds of each way, their ratio, and whether the weights are the same to the bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MEASURE = """
import hashlib, json, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "ctxbench":
    from ctxbench.backends.hf import load_model as load
    model = load("smollm2-135m", device="cpu", dtype="float32").model
else:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from ctxbench.model.files import locate
    _, path, gguf = locate("smollm2-135m")
    AutoConfig.from_pretrained(str(path), gguf_file=gguf)
    AutoTokenizer.from_pretrained(str(path), gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(str(path), gguf_file=gguf, dtype=torch.float32).eval()
seconds = time.perf_counter() - t0
digest = hashlib.sha256()
for name, tensor in sorted(model.state_dict().items()):
    if "rotary_emb" not in name:
        digest.update(name.encode() + tensor.contiguous().numpy().tobytes())
print(json.dumps({"seconds": seconds, "weights": digest.hexdigest()}))
"""


def once(way: str) -> dict:
    env = {**os.environ, "CTXBENCH_NO_MODEL_CACHE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", MEASURE, way], capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1, help="runs of each way (the median is printed)")
    args = ap.parse_args()
    results = {way: [once(way) for _ in range(args.runs)] for way in ("transformers", "ctxbench")}
    seconds = {way: statistics.median(r["seconds"] for r in runs) for way, runs in results.items()}
    same = len({r["weights"] for runs in results.values() for r in runs}) == 1
    print(f"first load of the default model from its GGUF file, median of {args.runs} run(s), each in a fresh process")
    print(f"  transformers' loader (naive): {seconds['transformers']:6.1f} s")
    print(f"  ctxbench load:                {seconds['ctxbench']:6.1f} s")
    print(f"  ratio: {seconds['transformers'] / seconds['ctxbench']:.2f}x faster; weights the same to the bit: {same}")


if __name__ == "__main__":
    main()
