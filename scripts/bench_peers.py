"""Benchmark: ctxbench against lm-evaluation-harness on the jobs the two share, side by side in one run.

Both tools get the same model copy (the default model dequantised to a transformers folder, the copy
``ctxbench`` itself loads), the same documents and the same targets, in float32 on the CPU. Each job
runs as a whole process per tool, model loads included, as a user would run it: ``ctxbench`` through
its CLI, lm-eval through its Python API (``simple_evaluate``, one call per method, driven by
``scripts/peer_lmeval.py`` in lm-eval's own virtual environment). The two alternate, ``--reps`` times.
Each process's peak RSS comes from ``wait4``.

lm-eval goes in a virtual environment of its own; nothing in ctxbench's set-up changes:

    python3 -m venv /tmp/lmeval && /tmp/lmeval/bin/pip install torch==2.13.0 'lm_eval[hf,ruler]==0.4.13'
    python scripts/bench_peers.py                    # writes results/peer-bench.md

How the targets are aligned. ``ctxbench ppl --bos on`` scores a document's first ``L`` tokens, BOS
first: the input is ``[BOS] + t[0:L-1]`` and the targets ``t[0:L-1]``. lm-eval's
``loglikelihood_rolling`` on a text of exactly ``L - 1`` tokens, with ``max_length >= L``, puts its
prefix token (SmolLM2's BOS, which HFLM takes for ``prefix_token_id``) before them and scores every
one: the same ``L - 1`` targets after the same context. Each document is written as the text of its
first ``L - 1`` tokens, and only where re-tokenising that text gives those tokens back (the cut never
splits a merge). Before anything is timed, one cell (``none``, the shortest length, every document)
is run by both and compared; a relative difference above ``1e-6`` stops the bench.
``--misalign`` gives lm-eval each document from its second token on (the targets shifted by one),
to watch the check fail.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CTXBENCH = [sys.executable, "-m", "ctxbench"]
LMEVAL_DEFAULT = "/tmp/lmeval/bin/python"
INSTALL = "python3 -m venv /tmp/lmeval && /tmp/lmeval/bin/pip install torch==2.13.0 'lm_eval[hf,ruler]==0.4.13'"
TOLERANCE = 1e-6  # relative NLL difference the check allows (float32: both run transformers' SDPA forward)
GRID = {"methods": ("none", "linear", "ntk", "yarn"), "factor": 2, "lengths": (1024, 2048, 4096), "docs": 2}
SINGLE = {"methods": ("none", "yarn"), "factor": 2, "lengths": (8192,), "docs": 1}
NIAH = {"length": 4096, "samples": 10}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Timed:
    seconds: float
    peak_gib: float
    out: str


def run(argv: list[str]) -> Timed:
    """Run ``argv`` to the end: wall seconds and its peak resident memory (``wait4``'s ru_maxrss, KiB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    out = proc.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(argv)}\n{out[-3000:]}")
    return Timed(seconds, usage.ru_maxrss / 2**20, out)


def checkpoint() -> str:
    """The default model as the transformers folder ctxbench dequantises it to (made once, cached)."""
    from ctxbench.backends.hf import load_model as load

    lm = load("smollm2-135m", device="cpu", dtype="float32")
    return str(lm.checkpoint)


TOKENS: dict[int, list[int]] = {}  # corpus document -> its token ids (each document tokenised once per run)


def documents(tokenizer, lengths, count: int) -> list[list[int]]:
    """The first ``count`` documents of the built-in corpus with more than ``max(lengths)`` tokens whose
    text cut to ``L - 1`` tokens re-tokenises to exactly those tokens, for every ``L``."""
    from ctxbench.tasks.corpus import stdlib_corpus

    picked = []
    for i, text in enumerate(stdlib_corpus().texts):
        if len(text.encode()) < max(lengths):  # a byte-level BPE token is at least one byte: too short whatever it tokenises to
            continue
        ids = TOKENS.setdefault(i, tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) < max(lengths):
            continue
        if all(tokenizer(tokenizer.decode(ids[: n - 1]), add_special_tokens=False)["input_ids"] == ids[: n - 1] for n in lengths):
            picked.append(ids[: max(lengths) - 1])
        if len(picked) == count:
            return picked
    sys.exit(f"the built-in corpus has fewer than {count} documents of {max(lengths)} tokens that cut cleanly")


def write_docs(tokenizer, docs: list[list[int]], n: int, path: Path) -> str:
    with path.open("w") as f:
        for ids in docs:
            f.write(json.dumps({"text": tokenizer.decode(ids[: n - 1])}) + "\n")
    return str(path)


def method_copies(ckpt: str, methods, factor: float, tmp: Path) -> dict[str, str]:
    """Per method, the checkpoint with the method in its ``config.json`` as ``ctxbench export --to hf``
    writes it (the weights linked, not copied); ``none`` is the checkpoint itself."""
    from ctxbench.methods.export import export_settings

    out = {}
    for m in methods:
        if m == "none":
            out[m] = ckpt
            continue
        d = tmp / f"ckpt-{m}"
        d.mkdir()
        for f in Path(ckpt).iterdir():
            if f.name != "config.json":
                (d / f.name).symlink_to(f)
        config = json.loads((Path(ckpt) / "config.json").read_text())
        config.update(export_settings(m, factor, "hf", model=ckpt)["transformers>=5"])
        config.pop("rope_scaling", None)
        (d / "config.json").write_text(json.dumps(config, indent=1))
        out[m] = str(d)
    return out


def ctxbench_ppl(ckpt: str, job: dict, data: str, out: Path, bos: str, dtype: str) -> list[str]:
    return [*CTXBENCH, "ppl", "--model", ckpt, "--dataset", data, "--bos", bos, "--method", ",".join(job["methods"]),
            "--factor", str(job["factor"]), "--len", ",".join(str(n) for n in job["lengths"]), "--docs", str(job["docs"]),
            "--device", "cpu", "--dtype", dtype, "--out", str(out)]  # fmt: skip


def lmeval(python: str, spec: dict, tmp: Path, name: str) -> tuple[list[str], Path]:
    job, out = tmp / f"{name}.json", tmp / f"{name}-out.json"
    job.write_text(json.dumps(spec))
    return [python, str(ROOT / "scripts" / "peer_lmeval.py"), str(job), str(out)], out


def ctxbench_nll(csv: Path) -> dict[tuple[str, int], list[float]]:
    """Per (method label, length), each document's mean NLL in file order."""
    import pandas as pd

    rows = pd.read_csv(csv)
    rows = rows[(rows.metric == "nll") & (rows.doc != "all")]
    return {(str(m).split(" ")[0], int(n)): list(g.value) for (m, n), g in rows.groupby(["method", "length"], sort=False)}


def worst_difference(ours: dict, theirs: dict, lengths) -> float:
    """The largest relative difference of a document's mean NLL, ctxbench against lm-eval's summed
    log-likelihood over the same ``L - 1`` targets."""
    worst = 0.0
    for method, by_len in theirs.items():
        for n in lengths:
            for a, loglik in zip(ours[(method, n)], by_len[str(n)], strict=True):
                b = -loglik / (n - 1)
                worst = max(worst, abs(a - b) / abs(b))
    return worst


def native_bf16() -> tuple[bool, str]:
    """Whether this CPU multiplies bfloat16 at least as fast as float32 (native bf16: AMX, AVX512-BF16)."""
    import torch

    a = torch.randn(512, 512)

    def secs(dtype) -> float:
        x = a.to(dtype)
        x @ x
        t0 = time.perf_counter()
        for _ in range(3):
            x @ x
        return time.perf_counter() - t0

    ratio = secs(torch.float32) / secs(torch.bfloat16)
    return ratio >= 1.0, f"a bfloat16 matmul runs at {ratio:.2g}x float32's speed on this CPU"


def versions(python: str) -> str:
    from importlib.metadata import version

    theirs = subprocess.run([python, "-c", "from importlib.metadata import version as v; print(v('lm_eval'), v('torch'), v('transformers'))"],
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    return (f"ctxbench {version('ctxbench')} (torch {version('torch')}, transformers {version('transformers')}); "
            f"lm-eval {theirs[0]} (torch {theirs[1]}, transformers {theirs[2]})")  # fmt: skip


def cpu() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())  # fmt: skip
    return f"{os.cpu_count()}-core {model}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lmeval", default=LMEVAL_DEFAULT, help="lm-eval's virtual environment's python")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--jobs", default="grid,single,bf16,pass,niah")
    ap.add_argument("--out", default=str(ROOT / "results" / "peer-bench.md"))
    ap.add_argument("--misalign", action="store_true", help="shift lm-eval's documents by one token on purpose: the check must fail")
    args = ap.parse_args()
    if not Path(args.lmeval).exists():
        sys.exit(f"no lm-eval at {args.lmeval}: install it in a virtual environment of its own:\n  {INSTALL}")
    from transformers import AutoTokenizer

    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    ckpt = checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    table, notes = [], []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        copies = method_copies(ckpt, sorted({*GRID["methods"], *SINGLE["methods"]}), GRID["factor"], tmp)

        def ppl_pair(job: dict, name: str, dtype: str, methods=None) -> tuple[list[str], list[str], Path, Path]:
            job = {**job, "methods": methods or job["methods"]}
            docs = documents(tokenizer, job["lengths"], job["docs"])
            longest = max(job["lengths"])
            data = write_docs(tokenizer, docs, longest, tmp / f"{name}-docs.jsonl")  # ctxbench cuts each length itself
            theirs_docs = [d[1:] + d[:1] for d in docs] if args.misalign else docs  # --misalign: off by one token
            per_len = {str(n): write_docs(tokenizer, theirs_docs, n, tmp / f"{name}-docs-{n}.jsonl") for n in job["lengths"]}
            spec = {"kind": "ppl", "dtype": dtype, "methods": {m: copies[m] for m in job["methods"]}, "lengths": per_len}
            theirs, their_out = lmeval(args.lmeval, spec, tmp, name)
            ours_out = tmp / f"{name}.csv"
            return ctxbench_ppl(ckpt, job, data, ours_out, "on", dtype), theirs, ours_out, their_out

        # the check: one cell, both tools, before anything is timed
        check = {**GRID, "methods": ("none",), "lengths": (GRID["lengths"][0],)}
        ours, theirs, ours_out, their_out = ppl_pair(check, "check", "float32")
        run(ours)
        run(theirs)
        diff = worst_difference(ctxbench_nll(ours_out), json.loads(their_out.read_text()), check["lengths"])
        print(f"NLL check (none, {check['lengths'][0]} tokens, {check['docs']} documents): largest relative difference {diff:.2e}")
        if not diff <= TOLERANCE:
            sys.exit(f"the two tools disagree: relative NLL difference {diff:.2e} > {TOLERANCE:g}; the targets are not aligned, "
                     "nothing is timed")  # fmt: skip
        notes.append(f"NLL check before timing: none at {check['lengths'][0]} tokens, {check['docs']} documents, largest relative "
                     f"difference {diff:.1e} (limit {TOLERANCE:g})")  # fmt: skip

        bf16_ok, bf16_why = native_bf16()
        plan = []
        if "grid" in jobs:
            plan.append(("grid: none, linear, ntk, yarn x2 at 1k, 2k, 4k, 2 documents", GRID, "float32"))
        if "single" in jobs:
            plan.append(("one length: none and yarn x2 at 8k, 1 document", SINGLE, "float32"))
        if "bf16" in jobs and bf16_ok:
            plan.append(("one length, bfloat16: none and yarn x2 at 8k, 1 document", SINGLE, "bfloat16"))
        for what, job, dtype in plan:
            ours, theirs, ours_out, their_out = ppl_pair(job, f"{dtype}-{len(job['lengths'])}", dtype)
            times: dict[str, list[Timed]] = {"ctxbench": [], "lm-eval": []}
            for rep in range(args.reps):
                for tool, argv in (("ctxbench", ours), ("lm-eval", theirs)):
                    if tool == "ctxbench":
                        ours_out.unlink(missing_ok=True)  # a fresh results file: nothing resumed
                    times[tool].append(t := run(argv))
                    print(f"{what} [{dtype}] rep {rep + 1}: {tool} {t.seconds:.1f} s, peak {t.peak_gib:.2f} GiB", flush=True)
            diff = worst_difference(ctxbench_nll(ours_out), json.loads(their_out.read_text()), job["lengths"])
            best = {tool: min(t.seconds for t in ts) for tool, ts in times.items()}
            peak = {tool: max(t.peak_gib for t in ts) for tool, ts in times.items()}
            table.append((
                f"{what} ({dtype})",
                ", ".join(f"{t.seconds:.1f}" for t in times["ctxbench"]) + f" s; {peak['ctxbench']:.2f} GiB",
                ", ".join(f"{t.seconds:.1f}" for t in times["lm-eval"]) + f" s; {peak['lm-eval']:.2f} GiB",
                f"**{best['lm-eval'] / best['ctxbench']:.2f}x**",
                f"{peak['ctxbench'] / peak['lm-eval']:.2f} (max NLL diff {diff:.1e})",
            ))  # fmt: skip
            write_table(args, table, notes)  # each job's row as it lands: a later failure keeps it
        if "bf16" in jobs and not bf16_ok:
            table.append(("one length, bfloat16", "not run", f"{bf16_why}: no native bf16, so neither tool would use it", "", ""))
        if "pass" in jobs:
            table.append(pass_row(args.lmeval, ckpt, tokenizer, tmp))
        if "niah" in jobs:
            table.append(niah_row(args.lmeval, ckpt, tmp))
    write_table(args, table, notes)


ORDER = ("grid", "one length:", "one length, bfloat16", "one scoring pass", "RULER")  # the table's rows, in this order


def _order(row) -> int:
    return next((i for i, start in enumerate(ORDER) if row[0].startswith(start)), len(ORDER))


def write_table(args, table, notes) -> None:
    """The table, with the rows of jobs this run did not run kept from ``--out`` as it was (a job
    rerun alone replaces its own row only), and a note naming them."""
    load = os.getloadavg()
    kept = []
    if Path(args.out).is_file():
        ran = {_order(row) for row in table}
        for line in Path(args.out).read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(cells) == 5 and cells[0] not in ("job", "---") and _order(cells) not in ran:
                kept.append(tuple(cells))
    table = sorted([*table, *kept], key=_order)
    if kept:
        notes = [*notes, "rows kept from an earlier run of this script (this run did not run their jobs): "
                 + "; ".join(row[0] for row in kept)]  # fmt: skip
    lines = [
        "# ctxbench against lm-evaluation-harness",
        "",
        f"Written by `python scripts/bench_peers.py` on {date.today()}, {cpu()}, float32 unless said, "
        f"{args.reps} repetitions per tool, alternating; load average at the end {load[0]:.1f}. {versions(args.lmeval)}.",
        "Each time is a whole process (model load included): ctxbench's CLI, lm-eval's Python API "
        "(`simple_evaluate`, one call per method). The ratio is lm-eval's best time over ctxbench's "
        "(above 1: ctxbench is faster); memory is ctxbench's peak RSS over lm-eval's.",
        "",
        "| job | ctxbench (each rep; peak RSS) | lm-eval API (each rep; peak RSS) | speed ratio | memory ratio |",
        "| --- | --- | --- | ---: | --- |",
        *(f"| {' | '.join(row)} |" for row in table),
        "",
        *(f"- {n}" for n in notes),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


PASS_SCRIPT = """
import json, sys, time
import torch
from ctxbench.methods.setting import resolve
from ctxbench.backends.hf import load_model as load
ckpt, docs, n, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lm = load(ckpt, device="cpu", dtype="float32")
ids = [lm.tokenizer.bos_token_id] + lm.tokenizer(json.loads(open(docs).readline())["text"], add_special_tokens=False)["input_ids"]
ids = torch.tensor(ids[:n])
seconds = []
with lm.session(resolve("none"), 1.0, n) as session:
    for _ in range(repeats):
        t0 = time.perf_counter()
        nll = session.token_nll(ids)
        seconds.append(time.perf_counter() - t0)
print(json.dumps({"seconds": seconds, "nll_sum": float(nll.double().sum())}))
"""


def pass_row(python: str, ckpt: str, tokenizer, tmp: Path, repeats: int = 3) -> tuple[str, ...]:
    """One 8k scoring pass, each tool's model loaded once and the same document scored ``repeats``
    times: ctxbench's session (``token_nll``: the forward, the head in chunks) against lm-eval's
    ``loglikelihood_rolling``. Best of the repeats; the first pays for the first allocation."""
    n = SINGLE["lengths"][0]
    docs = write_docs(tokenizer, documents(tokenizer, (n,), 1), n, tmp / "pass-docs.jsonl")
    theirs, their_out = lmeval(python, {"kind": "pass", "dtype": "float32", "checkpoint": ckpt, "length": n, "docs": docs,
                                        "repeats": repeats}, tmp, "pass")  # fmt: skip
    b = run(theirs)
    a = run([sys.executable, "-c", PASS_SCRIPT, ckpt, docs, str(n), str(repeats)])
    ours, lm_eval = json.loads(a.out.strip().splitlines()[-1]), json.loads(their_out.read_text())
    diff = abs(ours["nll_sum"] + lm_eval["loglik"]) / abs(lm_eval["loglik"])
    best = min(ours["seconds"]), min(lm_eval["seconds"])
    return (f"one scoring pass at {n // 1024}k, model loaded once, best of {repeats} (float32)",
            ", ".join(f"{t:.1f}" for t in ours["seconds"]) + f" s; {a.peak_gib:.2f} GiB",
            ", ".join(f"{t:.1f}" for t in lm_eval["seconds"]) + f" s; {b.peak_gib:.2f} GiB",
            f"**{best[1] / best[0]:.2f}x**", f"{a.peak_gib / b.peak_gib:.2f} (NLL sum diff {diff:.1e})")  # fmt: skip


def niah_row(python: str, ckpt: str, tmp: Path) -> tuple[str, ...]:
    """RULER niah_single_1 at 4k: lm-eval's own task (``limit`` samples) against ``ctxbench niah
    --protocol ruler`` with as many trials, each tool building its samples by RULER's recipe."""
    what = f"RULER niah_single_1 at {NIAH['length']}, {NIAH['samples']} samples"
    theirs, their_out = lmeval(python, {"kind": "niah", "dtype": "float32", "checkpoint": ckpt, **NIAH}, tmp, "niah")
    ours = [*CTXBENCH, "niah", "--model", ckpt, "--protocol", "ruler", "--variant", "single_1", "--len", str(NIAH["length"]),
            "--trials", str(NIAH["samples"]), "--method", "none", "--device", "cpu", "--dtype", "float32", "--out", str(tmp / "niah.csv")]  # fmt: skip
    try:
        b = run(theirs)
    except SystemExit as exc:
        return (what, "not run", f"lm-eval could not run it offline: {str(exc).splitlines()[-1][:200]}", "", "")
    a = run(ours)
    return (what, f"{a.seconds:.1f} s; {a.peak_gib:.2f} GiB", f"{b.seconds:.1f} s; {b.peak_gib:.2f} GiB",
            f"**{b.seconds / a.seconds:.2f}x**", f"{a.peak_gib / b.peak_gib:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
