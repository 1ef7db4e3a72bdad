"""Benchmark: the same retrieval grid on ``--backend hf`` (transformers, float32) and ``--backend vllm``
(vLLM, bf16), end to end, in one process run: RULER's niah ``single_1`` and passkey, each method at one
factor, through the API every command uses (``ctxbench.run``), model loads and engine starts included.
Prints each backend's wall time per task and their ratio, and how often the two answer the same
(per trial: the same answer text, and the same score, since two different wrong answers both score 0;
with McNemar's test on the trials one gets right and the other wrong:
``ctxbench compare --across-backends``). Needs vLLM (``CTXBENCH_VLLM=1 bash scripts/setup.sh``).

    python scripts/bench_backend.py                       # niah 8k,16k and passkey 16k, none and yarn x2, 10 trials
    python scripts/bench_backend.py --niah-len 4k --passkey-len 4k --trials 5 --out-dir /tmp/bench

Rows go to ``OUT_DIR/backend-hf.csv`` and ``OUT_DIR/backend-vllm.csv`` (kept: a second run resumes and
times only what was left, so delete them for a fresh timing). A method vLLM cannot run at a length
(yarn x2's rotary table ends at 2L: a passkey prompt of 2L tokens plus its answer runs past it) is
reported as refused, with the engine check's reason, and left out of the ratio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ctxbench.errors import UserError


def timed_run(backend: str, dtype: str, out: Path, task: str, **kw) -> tuple[float, str]:
    """Seconds for one ``ctxbench.run`` (or the one-line refusal in place of the run)."""
    import ctxbench

    t0 = time.perf_counter()
    try:
        ctxbench.run(task=task, backend=backend, dtype=dtype, device="cpu", out=str(out), **kw)
    except UserError as exc:
        return time.perf_counter() - t0, f"refused: {exc}"
    return time.perf_counter() - t0, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="none,yarn")
    ap.add_argument("--factor", default="2")
    ap.add_argument("--niah-len", default="8k,16k")
    ap.add_argument("--passkey-len", default="16k")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--out-dir", default="results")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    grid = [("niah", dict(length=args.niah_len, variants="single_1", trials=args.trials)),
            ("passkey", dict(length=args.passkey_len, trials=max(1, args.trials // 5), depths="5"))]  # fmt: skip
    grid = [(task, kw) for task, kw in grid if kw["length"]]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    seconds: dict = {}  # (backend, task, method) -> wall seconds
    notes: list[str] = []
    # method by method, vLLM first: a method vLLM refuses (before its plan) is not timed on hf either,
    # so each ratio compares the same work; alternating the backends spreads any load on the machine over both
    for task, kw in grid:
        for method in methods:
            for backend, dtype in (("vllm", "bfloat16"), ("hf", "float32")):
                s, why = timed_run(backend, dtype, out / f"backend-{backend}.csv", task, method=method, factor=args.factor, **kw)
                print(f"{backend:5s} {dtype:9s} {task:8s} {method:8s} {s:8.1f} s {why}", flush=True)
                if why:
                    notes.append(f"{task} {method} on {backend}: {why}")
                    break
                seconds[(backend, task, method)] = s
    from ctxbench.report import parity

    pairs, _ = parity.parity(str(out / "backend-hf.csv"), str(out / "backend-vllm.csv"))
    import os
    import platform

    from ctxbench.backends.vllm import version

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    lines = [f"{cpu}, {os.cpu_count()} cores; vLLM {version()}; methods {args.methods} at factor {args.factor}, "
             f"{args.trials} trials per niah cell; wall time of each backend, model load and engine starts included, "
             "each method run on its own, vLLM first:", "",
             "| task | lengths | methods on both | hf float32, s | vllm bf16, s | speed-up | same answers | same score | cells the same (McNemar) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for task, kw in grid:
        timed = [m for m in methods if ("hf", task, m) in seconds]
        cells = [p for p in pairs if p.task == task and p.metric == "accuracy" and p.verdict != "unpaired"]
        same, scored, total = sum(p.same for p in cells), sum(p.same_score for p in cells), sum(p.trials for p in cells)
        hf, vl = (sum(seconds[(b, task, m)] for m in timed) for b in ("hf", "vllm"))
        ratio = f"{hf / vl:.2f}x" if vl else "-"
        lines.append(f"| {task} | {kw['length']} | {','.join(timed) or '-'} | {hf:.0f} | {vl:.0f} | {ratio} | "
                     f"{same}/{total} ({same / max(1, total):.0%}) | {scored}/{total} ({scored / max(1, total):.0%}) | "
                     f"{sum(p.verdict == 'same' for p in cells)}/{len(cells)} |")  # fmt: skip
    lines += [f"\nnote: {note}" for note in notes]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    (out / "backend-bench.md").write_text(text)


if __name__ == "__main__":  # vLLM starts its engine in this process; the guard keeps any spawned worker from rerunning the bench
    main()
