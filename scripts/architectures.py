"""Every method on each architecture users deploy, on both backends: ``results/architectures.csv``.

The architectures are tiny random-weight checkpoints carrying each real model's RoPE settings
(``tests/architectures.py``: Llama-3.1, Qwen2.5, Qwen3, Phi-3.5, Gemma-3, GPT-NeoX, Mistral,
OLMo-2). For each architecture, backend and method, a row says one of:

- ``refused``: the backend refuses it before the plan, ``reason`` its one line (the rules
  ``tests/architectures.py:refusal`` evaluates; ``tests/backends/test_architectures.py`` fails when
  this file no longer says what they say);
- ``ok``: it ran ``ppl`` (one document) at 512 and 1k tokens and ``passkey --metrics answer_nll``
  (one trial) at 512, factor 2, in float32; on vLLM the engine check passed and perplexity and
  answer NLL agree with transformers' (``ppl_rel_diff``, ``answer_nll_rel_diff``: the largest
  relative difference over the cells) within the parity tolerance (1% and 5%,
  :data:`ctxbench.report.parity.RTOL`);
- ``differs``: it ran, outside that tolerance; ``failed``: a refusal after the plan (the engine
  check) or an error, ``reason`` its line.

Run it (vLLM installed: ``CTXBENCH_VLLM=1 bash scripts/setup.sh``; about 20 minutes on 2 cores):

    nice -n 10 .venv/bin/python scripts/architectures.py [--only gemma-3,gpt-neox] [--backends hf]

``--only``/``--backends`` rewrite those rows and keep the others. ``docgen.architectures_table``
renders the file into docs/backends.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fixtures: tests/architectures.py, tests/helpers.py
OUT = ROOT / "results" / "architectures.csv"


def _version(dist: str) -> str:
    for name in (dist, f"{dist}-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _cells(frame, metric: str) -> dict:
    rows = frame[frame.metric == metric]
    if metric == "ppl":
        rows = rows[rows.doc == "all"]
    return {(r.label, int(r.length)): float(r.value) for r in rows.itertuples()}


def measure(lm, method: str) -> dict:
    """``ppl`` and passkey's ``answer_nll`` of ``method`` on ``lm`` at every length: {(metric, label, length): value}."""
    from architectures import FACTOR, LENGTHS, PARAMS

    import ctxbench

    kw = dict(method=method, factor=FACTOR, seed=0)
    params = PARAMS.get(method)
    if params:
        kw["params"] = params
    out = {}
    # ppl first, at every length: one vLLM engine for the longest, which passkey's prompt and answer at the
    # shortest length then reuse (passkey at the longest would need a second engine: its answer runs past it)
    ppl = ctxbench.run(task="ppl", model=lm, docs=1, length=",".join(str(n) for n in LENGTHS), **kw)
    for (label, length), v in _cells(ppl, "ppl").items():
        out[("ppl", label, length)] = v
    keys = ctxbench.run(task="passkey", model=lm, trials=1, depths="0.5", metrics="answer_nll", length=str(LENGTHS[0]), **kw)
    for (label, length), v in _cells(keys, "answer_nll").items():
        out[("answer_nll", label, length)] = v
    return out


def _rel(a: dict, b: dict, metric: str) -> float:
    keys = [k for k in a if k[0] == metric]
    if not keys or any(k not in b for k in keys):
        return math.nan
    return max(abs(b[k] - a[k]) / abs(a[k]) for k in keys)


def rows_for(name: str, backends: tuple[str, ...], folder: Path) -> list[dict]:
    from architectures import FACTOR, LENGTHS, build, config_of, methods, random_model, refusal

    from ctxbench.errors import UserError
    from ctxbench.report.parity import RTOL

    path = build(name, folder / name)
    common = dict(architecture=name, model_type=config_of(name).model_type, factor=f"{FACTOR:g}",
                  lengths=",".join(str(n) for n in LENGTHS), vllm=_version("vllm"), transformers=_version("transformers"),
                  torch=_version("torch"), date=dt.date.today().isoformat())  # fmt: skip
    model = random_model(name)
    hf_lm = vllm_lm = None
    # every transformers number before the first engine: vLLM 0.32's transformers modeling backend (GPT-NeoX,
    # OLMo-2) patches the transformers model class in this process, and a model of it built before no longer runs
    hf_values: dict[str, dict] = {}
    out = []
    for backend in ("hf", "vllm"):
        for method in methods():
            row = dict(common, backend=backend, method=method, status="", reason="", ppl_rel_diff="", answer_nll_rel_diff="")
            reason = refusal(backend, name, method, model)
            if reason is not None:
                out.append(dict(row, status="refused", reason=reason))
                continue
            if backend not in backends and backend == "vllm":
                continue
            try:
                if backend == "hf":
                    if hf_lm is None:
                        from ctxbench.backends.hf import load_model as load

                        hf_lm = load(str(path), device="cpu", dtype="float32", attn="sdpa")
                    hf_values[method] = values = measure(hf_lm, method)
                    ok = all(math.isfinite(v) for v in values.values())
                    out.append(dict(row, status="ok" if ok else "failed", reason="" if ok else "a value is not finite"))
                else:
                    if vllm_lm is None:
                        from ctxbench.backends import vllm
                        from ctxbench.runner.grid import ModelConfig

                        vllm_lm = vllm.load(ModelConfig(model=str(path), backend="vllm", dtype="float32"))
                    values, ref = measure(vllm_lm, method), hf_values[method]
                    d_ppl, d_nll = _rel(ref, values, "ppl"), _rel(ref, values, "answer_nll")
                    ok = d_ppl < RTOL["ppl"] and d_nll < RTOL["answer_nll"]
                    out.append(dict(row, status="ok" if ok else "differs", ppl_rel_diff=f"{d_ppl:.2e}", answer_nll_rel_diff=f"{d_nll:.2e}"))
            except UserError as err:
                out.append(dict(row, status="failed", reason=err.what))
            except Exception as err:  # noqa: BLE001 - a crash inside an engine is what the table reports
                out.append(dict(row, status="failed", reason=f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"))
            print(name, backend, method, out[-1]["status"], out[-1]["reason"] or out[-1]["ppl_rel_diff"], flush=True)
    if vllm_lm is not None:
        vllm_lm.close()
    return out


def main() -> None:
    from architectures import ARCHITECTURES, BACKENDS, COLUMNS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="architectures to rerun, comma-separated (default: all)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="hf,vllm (default) or hf")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ARCHITECTURES)
    backends = tuple(b for b in args.backends.split(",") if b)
    kept = []
    if Path(args.out).exists():
        with open(args.out, newline="") as f:
            kept = [r for r in csv.DictReader(f) if r["architecture"] not in names]
    order = {n: i for i, n in enumerate(ARCHITECTURES)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:  # the file is written after each architecture: a killed run keeps what it measured
            if len(names) == 1:
                kept += rows_for(name, backends, Path(tmp))
            else:  # each architecture in a fresh process: vLLM's transformers modeling backend patches classes in-process
                part = Path(tmp) / f"{name}.csv"
                subprocess.run([sys.executable, __file__, "--only", name, "--backends", args.backends, "--out", str(part)], check=True)
                with open(part, newline="") as f:
                    kept += list(csv.DictReader(f))
            rows = sorted(kept, key=lambda r: (order.get(r["architecture"], 99), r["backend"]))
            with open(args.out, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
                w.writeheader()
                w.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
            print(f"wrote {args.out}: {len(rows)} rows", flush=True)


if __name__ == "__main__":
    main()
