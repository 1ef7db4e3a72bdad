"""Benchmark on a GPU: ctxbench's perplexity forward against the naive ``labels=`` forward, and each
attention-level method against plain SDPA under each SDPA backend, on a random-weight model of a
named shape (throughput does not depend on weight values). One command, a few minutes:

    python scripts/bench_gpu.py                              # Llama-3.2-1B shape, bf16, 8k..128k
    python scripts/bench_gpu.py --shape llama3-8b --len 8k,32k
    python scripts/bench_gpu.py --smoke                      # tiny shape, short lengths: runs on a CPU

It prints, per length: seconds, achieved TFLOP/s as a fraction of the measured bf16 matmul peak
(FLOPs as ctxbench's cost model counts them), peak memory, the attention path each method ran
(``extra.attention_kernel`` in rows: ``whole-flash+cudnn``, ``block-efficient``, ...), its time
relative to plain SDPA (the default backend and each one forced), the plan's estimate of a forward
(ctxbench's rates, fitted from calibration forwards of 1024 and 4096 tokens) against the real time, and at the first
length each method's |delta NLL| between the whole-sequence path and the block partition. What runs
out of memory is said so and skipped; ``--budget`` stops starting new measurements after that many
seconds and says what it left out. Markdown tables, so the output can be pasted into the docs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import torch

SHAPES = {
    # meta-llama/Llama-3.2-1B's config.json (random weights)
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                        tie_word_embeddings=True, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    # meta-llama/Meta-Llama-3-8B's config.json
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=8192,
                      tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
    # --smoke: the tests' tiny model (trained length 64)
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 vocab_size=258, max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}  # fmt: skip
METHODS = "rerope,leaky-rerope,self-extend,string,dca,ms-poe,logn,ssmax"


def build(shape: str, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape], bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(previous)
    return model


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(device: str, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of an n x n x n matrix product (mean of five after two warm-ups)."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(2):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        a @ b
    sync(device)
    return 2 * n**3 * 5 / (time.perf_counter() - t0)


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


class Bench:
    def __init__(self, args, device: str, budget: float) -> None:
        self.args, self.device, self.budget, self.t0 = args, device, budget, time.perf_counter()
        self.skipped: list[str] = []
        self.records: list[dict] = []  # one per printed row, for --json

    def over(self, what: str) -> bool:
        if self.budget and time.perf_counter() - self.t0 > self.budget:
            self.skipped.append(what)
            return True
        return False

    def run(self, what: str, call, warm: bool = True):
        """(seconds, peak MB, result) of ``call()`` after one untimed call (cuDNN plans, kernel choice),
        or (None, None, reason) when it ran out of memory or failed."""
        from ctxbench.model.measure import Measured

        if self.over(what):
            return None, None, "skipped (time budget)"
        try:
            if warm:
                with torch.inference_mode():
                    call()
            with torch.inference_mode(), Measured(self.device) as m:
                out = call()
            return m.seconds, m.peak_mb, out
        except Exception as exc:  # noqa: BLE001 - a benchmark reports and goes on
            if is_oom(exc):
                gc.collect()
                if self.device.startswith("cuda"):
                    torch.cuda.empty_cache()
                return None, None, "out of memory"
            return None, None, f"failed: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"
        finally:
            gc.collect()
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()


def one_length(n, model, geom, size, peak, plan, bench, backends, methods, ratios, first: bool) -> None:
    """The rows of one length: ctxbench's plain forward, the naive one, plain SDPA per backend, each method."""
    from torch.nn.attention import sdpa_kernel

    from ctxbench.methods import attention, kernels, resolve
    from ctxbench.methods.patching import applied
    from ctxbench.model.scoring import token_nll

    device = bench.device
    ids = torch.randint(0, model.config.vocab_size, (1, n), device=device)
    factor = max(1.0, n / geom.trained_len)
    estimate = plan(n) if plan else None

    def row(what, seconds, mb, base, path="", estimate=None, method=""):
        bench.records.append({"length": n, "what": what, "method": method, "attention_path": path,
                              "seconds": seconds, "x_plain": seconds / base if seconds is not None and base else None,
                              "peak_gb": mb / 1024 if seconds is not None else None,
                              "tflops": size.forward_flops(n) / seconds / 1e12 if seconds else None,
                              "plan_seconds": estimate, "why_not": None if seconds is not None else mb})  # fmt: skip
        if seconds is None:  # mb: why not
            print(f"| {n} | {what} | {mb} | | | | | {path} | | |")
            return
        ratio = f"{seconds / base:.2f}" if base else ""
        est = f"{estimate:.3g} | {estimate / seconds:.2f}" if estimate else " | "
        rate = size.forward_flops(n) / seconds
        print(f"| {n} | {what} | {seconds:.3f} | {ratio} | {rate / 1e12:.3g} | {rate / peak:.0%} | {mb / 1024:.2f} | "
              f"{path} | {est} |")  # fmt: skip

    def plain():
        return token_nll(model, ids[0])

    plain_s, plain_mb, why = bench.run(f"{n} plain", plain)
    row("ctxbench forward, plain SDPA (`none`)", plain_s, plain_mb if plain_s is not None else why, None, "sdpa", estimate,
        method="none")
    naive_s, naive_mb, why = bench.run(f"{n} naive", lambda: model(ids, labels=ids).loss)
    if naive_s is None:
        row("naive `labels=` forward", None, why, None, method="naive")
    else:
        memory = f" (peak memory {naive_mb / max(plain_mb, 1):.1f}x)" if plain_s is not None else ""
        row(f"naive `labels=` forward{memory}", naive_s, naive_mb, plain_s, method="naive")
    forced = {}
    for label, backend in backends:

        def forced_call(backend=backend):
            with sdpa_kernel([backend]):
                return plain()

        s, mb, why = bench.run(f"{n} sdpa-{label}", forced_call)
        forced[label] = s
        row(f"plain SDPA, {label} backend", s, mb if s is not None else why, plain_s, label, method=f"none/{label}")
    for spec in methods:
        # the tiny --smoke model has 2 layers: ms-poe's default first layer (2) would leave none
        setting = resolve(spec, {"first_layer": 0} if spec == "ms-poe" and model.config.num_hidden_layers <= 2 else None)

        def method_call(setting=setting):
            with applied(model, geom, setting, factor, n):
                return plain()

        kernels.forget()
        s, mb, out = bench.run(f"{n} {spec}", method_call)
        path = kernels.ran()
        if s is None:
            row(spec, None, out, None, path, method=spec)
            ratios.setdefault(spec, {})[n] = out[:40]
            continue
        vs = ", ".join(f"{s / t:.2f}x {label}" for label, t in forced.items() if t)
        row(spec + (f" ({vs})" if vs else ""), s, mb, plain_s, path, estimate, method=spec)
        ratios.setdefault(spec, {})[n] = f"{s / plain_s:.2f}x" if plain_s else "-"
        if first and path.startswith("whole-"):  # the same forward through the block partition
            saved, attention.WHOLE_DEVICES = attention.WHOLE_DEVICES, ()
            kernels.forget()
            try:
                bs, _, block = bench.run(f"{n} {spec} block", method_call, warm=False)
            finally:
                attention.WHOLE_DEVICES = saved
            if bs is not None:
                delta = abs(out.double().mean().item() - block.double().mean().item())
                bench.records.append({"length": n, "what": f"{spec}: block partition", "method": f"{spec}/block",
                                      "attention_path": kernels.ran(), "seconds": bs, "x_plain": bs / plain_s,
                                      "delta_nll": delta})  # fmt: skip
                print(f"| {n} | {spec}: block partition (check: \\|delta NLL\\| {delta:.2e} nats/token) | {bs:.3f} | "
                      f"{bs / plain_s:.2f} | | | | {kernels.ran()} | | |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama3.2-1b", choices=[s for s in SHAPES if s != "tiny"])
    ap.add_argument("--len", dest="length", default="8k,32k,64k,128k")
    ap.add_argument("--method", default=METHODS, help="attention-level methods to time (comma list)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--budget", type=float, default=0.0, help="seconds after which no new measurement starts (0: none)")
    ap.add_argument("--json", default="", help="also write every row, the kernel choices and the provenance (torch, "
                    "device, commit) to this JSON file: the docs' GPU status is generated from it")
    ap.add_argument("--smoke", action="store_true", help="the tiny test shape at 256 and 512 tokens, float32 on a CPU; "
                    "the whole-sequence calls run there too, through the reference kernel")
    args = ap.parse_args(argv)
    os.environ.setdefault("CTXBENCH_CACHE", tempfile.mkdtemp(prefix="bench-gpu-"))  # the plan's rate, measured here

    import transformers

    from ctxbench.backends.hf import HfEngine as LoadedModel
    from ctxbench.methods import kernels
    from ctxbench.model.geometry import RopeGeometry
    from ctxbench.model.size import ModelSize
    from ctxbench.parsing import parse_lengths

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    shape = "tiny" if args.smoke else args.shape
    lengths = [256, 512] if args.smoke else parse_lengths(args.length)
    dtype = torch.float32 if args.smoke and not device.startswith("cuda") else getattr(torch, args.dtype)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    print(f"# bench_gpu: {name}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"shape {shape}, {str(dtype).replace('torch.', '')}")  # fmt: skip
    peak = matmul_peak(device, dtype, 512 if args.smoke else 8192)
    print(f"matmul peak ({str(dtype).replace('torch.', '')}): {peak / 1e12:.3g} TFLOP/s\n")
    if args.smoke:  # the whole-sequence calls through the reference kernel, so every code path runs here
        from ctxbench.methods import attention

        attention.WHOLE_DEVICES = (*attention.WHOLE_DEVICES, device.split(":")[0])

    model = build(shape, device, dtype)
    geom = RopeGeometry.from_config(model.config)
    size = ModelSize.from_config(model.config, f"random-{shape}")
    lm = LoadedModel(model, None, geom, f"random-{shape}", "random", device, str(dtype).replace("torch.", ""))
    try:
        from ctxbench.runner.costmodel import measured_rate

        rate = measured_rate(lm)
        plan = lambda n: rate.seconds(size.forward_parts(n))  # noqa: E731
    except Exception as exc:  # noqa: BLE001
        print(f"plan estimate unavailable: {type(exc).__name__}: {exc}")
        plan = None
    bench = Bench(args, device, args.budget)
    methods = [m for m in args.method.split(",") if m]
    backends = []
    if device.startswith("cuda"):
        from torch.nn.attention import SDPBackend

        backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                    ("efficient", SDPBackend.EFFICIENT_ATTENTION)]  # fmt: skip
    ratios: dict[str, dict[int, str]] = {}
    print("| length | what | seconds | x plain | TFLOP/s | of peak | peak GB | attention path | plan s | plan / real |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for n in lengths:
        one_length(n, model, geom, size, peak, plan, bench, backends, methods, ratios, first=n == lengths[0])
    print("\n## attention-level methods, time relative to plain SDPA (default backend)\n")
    print("| method | " + " | ".join(str(n) for n in lengths) + " |")
    print("| --- | " + " | ".join("---:" for _ in lengths) + " |")
    for spec, by_len in ratios.items():
        print(f"| {spec} | " + " | ".join(by_len.get(n, "-") for n in lengths) + " |")
    print("\nkernel choices (class of call -> kernel; timings s; rejected):")
    for key, choice in kernels.chosen().items():
        print(f"  {key}: {choice}  {kernels.TIMINGS.get(key, {})}  {kernels.REJECTED.get(key, {})}")
    if bench.skipped:
        print(f"\nleft out by --budget {args.budget:g}s: {', '.join(bench.skipped)}")
    total = time.perf_counter() - bench.t0
    print(f"\ntotal {total:.0f} s")
    if args.json:
        write_json(args.json, bench, name=name, shape=shape, dtype=dtype, device=device, peak=peak, lengths=lengths,
                   total=total, kernels=kernels)  # fmt: skip
    return 0


def write_json(path: str, bench: Bench, *, name, shape, dtype, device, peak, lengths, total, kernels) -> None:
    """The run as data: provenance (what ran, where, from which commit), every row, the kernel choices."""
    import datetime
    import json
    import platform
    import subprocess

    import transformers

    commit = os.environ.get("CTXBENCH_COMMIT") or subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=os.path.dirname(__file__) or "."
    ).stdout.strip()
    doc = {
        "provenance": {
            "script": "scripts/bench_gpu.py", "device": name, "device_kind": device.split(":")[0],
            "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "python": platform.python_version(), "commit": commit or "unknown", "shape": shape,
            "dtype": str(dtype).replace("torch.", ""), "lengths": lengths, "matmul_peak_tflops": peak / 1e12,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(total, 1), "budget": bench.budget, "left_out": bench.skipped,
        },
        "rows": bench.records,
        "kernels": {str(k): str(v) for k, v in kernels.chosen().items()},
    }  # fmt: skip
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
