"""``ctxbench compare --across-backends A.csv B.csv``: is an engine computing what ctxbench measured?

Cells of the same grid run on two backends (``hf`` in one file, ``vllm 0.32.0`` in the other, say)
are paired on their identity without the backend and the dtype (:data:`ctxbench.results.identity.VIEW`
with the options that only add rows left out, as the pivot does). Each pair gets a verdict:

- retrieval tasks (per-trial rows): the share of trials with the same answer (:func:`same_answer`:
  as far as both decoded, since the ``hf`` path stops a trial once its answer is found), the share
  the task's scorer scores the same (two different wrong answers score the same 0), and the
  exact McNemar test (:func:`ctxbench.stats.mcnemar_exact`) on the discordant trials (right on one
  backend, wrong on the other). ``same`` unless p < 0.05;
- perplexity (``ppl``) and the answer NLL (``answer_nll``): the relative difference of the cell's
  aggregate, against :data:`RTOL`, the tolerance for a bf16 engine against a float32 reference
  (docs/design.md, "Backends"). ``same`` within it.

A cell in one file only is listed as ``unpaired`` and judged nothing. The command exits 1 when a
pair ``differs``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ctxbench.errors import UserError
from ctxbench.results.identity import VIEW, table_view_key
from ctxbench.results.store import read_records

# Relative tolerance of a loss aggregate between a bf16 engine and the float32 reference: bf16 keeps
# 8 significant bits (2^-8 = 0.4% per value); over thousands of tokens the errors average out, and
# what is left is the engine's other kernels and the rounding of the weights (measured: see docs).
RTOL = {"ppl": 0.01, "answer_nll": 0.05}
ALPHA = 0.05  # McNemar's level for a retrieval cell
NOT_PAIRED = ("backend", "dtype")


@dataclass(frozen=True)
class Pair:
    """One cell of the grid on both backends, and its verdict."""

    task: str
    label: str
    factor: str
    length: str
    depth: str
    metric: str  # accuracy, ppl or answer_nll
    a: float | None
    b: float | None
    verdict: str  # same | differs | unpaired
    detail: str  # "10/10 same answers, McNemar p = 1" or "+0.31% (tolerance 2%)"
    backends: tuple[str, str] = ("", "")
    same: int = 0  # retrieval: trials with the same answer on both backends (same_answer)
    trials: int = 0  # retrieval: trials in both files
    same_score: int = 0  # retrieval: trials the task's scorer scores the same on both backends


def _key(record: dict, tasks) -> tuple:
    view = table_view_key(record, tasks)
    return tuple(v for c, v in zip(VIEW, view, strict=True) if c not in NOT_PAIRED)


def _cells(records: list[dict], tasks) -> dict:
    """Per paired key: {"backend", "dtype", "agg": {metric: value}, "trials": {(depth, trial): (score, answer)}}."""
    out: dict = {}
    for r in records:
        if r.get("status", "ok") != "ok":
            continue
        cell = out.setdefault(_key(r, tasks), {"backend": r.get("backend") or "hf", "dtype": r.get("dtype", ""), "agg": {}, "trials": {},
                                               "record": r})  # fmt: skip
        trial, doc, metric = str(r.get("trial", "")), r.get("doc", ""), r["metric"]
        try:
            value = float(r["value"])
        except ValueError:
            continue
        if trial.isdigit() and metric in ("correct", "score"):
            cell["trials"][(r.get("depth", ""), trial)] = (value, r.get("answer", ""))
            if "answer_nll" in r.get("extra", ""):
                nll = json.loads(r["extra"]).get("answer_nll")
                if nll is not None:
                    cell.setdefault("trial_nll", {})[(r.get("depth", ""), trial)] = float(nll)
        elif trial in ("", "all") and doc in ("", "all") and metric in ("ppl", "answer_nll"):
            cell["agg"][metric] = value
    return out


def parity(a_path: str, b_path: str) -> tuple[list[Pair], list[str]]:
    """The pairs of cells of two results files, each with its verdict, and notes for people."""
    from ctxbench.stats import mcnemar_exact
    from ctxbench.tasks import registry

    tasks = registry()
    a_cells, b_cells = _cells(read_records(a_path, must_exist=True), tasks), _cells(read_records(b_path, must_exist=True), tasks)
    if not a_cells or not b_cells:
        raise UserError(f"'{a_path if not a_cells else b_path}' holds no finished cell", "give two results CSVs of the same grid")
    pairs: list[Pair] = []
    where = {c: i for i, c in enumerate(VIEW) if c not in NOT_PAIRED}
    at = {c: list(where).index(c) for c in ("task", "label", "factor", "length", "depth")}

    def fields(key):
        return {c: key[i] for c, i in at.items()}

    same_backend = 0
    for key in sorted(set(a_cells) | set(b_cells), key=lambda k: tuple(_sortable(x) for x in k)):
        a, b = a_cells.get(key), b_cells.get(key)
        f = fields(key)
        if a is None or b is None:
            one = a or b
            metric = "accuracy" if one["trials"] else next(iter(one["agg"]), "")
            pairs.append(Pair(**f, metric=metric, a=None, b=None, verdict="unpaired",
                              detail=f"only in {a_path if a else b_path}"))  # fmt: skip
            continue
        if a["backend"] == b["backend"]:
            same_backend += 1
        backends = (f"{a['backend']} {a['dtype']}", f"{b['backend']} {b['dtype']}")
        if a["trials"] or b["trials"]:
            common = sorted(set(a["trials"]) & set(b["trials"]))
            if not common:
                pairs.append(Pair(**f, metric="accuracy", a=None, b=None, verdict="unpaired", detail="no trial in both files", backends=backends))
                continue
            ra = [a["trials"][t][0] >= 1 for t in common]
            rb = [b["trials"][t][0] >= 1 for t in common]
            agree = sum(same_answer(a["trials"][t][1], b["trials"][t][1]) for t in common)
            scored = sum(a["trials"][t][0] == b["trials"][t][0] for t in common)
            right_wrong = sum(x and not y for x, y in zip(ra, rb, strict=True))
            wrong_right = sum(y and not x for x, y in zip(ra, rb, strict=True))
            p = mcnemar_exact(right_wrong, wrong_right)
            verdict = "differs" if p < ALPHA else "same"
            pairs.append(Pair(**f, metric="accuracy", a=sum(ra) / len(ra), b=sum(rb) / len(rb), verdict=verdict,
                              detail=f"{agree}/{len(common)} same answers ({scored}/{len(common)} same score), "
                                     f"{right_wrong + wrong_right} discordant, McNemar p = {p:.3g}",
                              backends=backends, same=agree, trials=len(common), same_score=scored))  # fmt: skip
        for metric in ("ppl", "answer_nll"):
            x, y = a["agg"].get(metric), b["agg"].get(metric)
            if x is None or y is None:
                continue
            rel = (y - x) / abs(x) if x else math.inf
            verdict = "same" if abs(rel) <= RTOL[metric] else "differs"
            pairs.append(Pair(**f, metric=metric, a=x, b=y, verdict=verdict, detail=f"{rel:+.2%} (tolerance {RTOL[metric]:.0%})",
                              backends=backends))  # fmt: skip
    notes = []
    if same_backend:
        notes.append(f"{same_backend} paired cell(s) ran on the same backend in both files: this compares backends only where they differ")
    return pairs, notes


def same_answer(a: str, b: str) -> bool:
    """The same greedy answer as far as both decoded: one text starts with the other. The ``hf`` path
    stops a trial once its score can no longer change (its answer found), an engine decodes the
    task's whole budget; greedy decoding that agrees gives one answer that is a prefix of the other."""
    a, b = a.strip(), b.strip()
    return a.startswith(b) or b.startswith(a)


def _sortable(text: str):
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def differs(pairs: list[Pair]) -> bool:
    return any(p.verdict == "differs" for p in pairs)


def summary(pairs: list[Pair]) -> str:
    """One line: pairs judged the same, per metric, and the share of same answers over every trial."""
    judged = [p for p in pairs if p.verdict != "unpaired"]
    same = sum(p.verdict == "same" for p in judged)
    return f"{same}/{len(judged)} paired cells the same within tolerance ({len(pairs) - len(judged)} unpaired)"


def to_markdown(pairs: list[Pair], notes: list[str]) -> str:
    """The parity table as Markdown (the README's and docs' table is this, generated)."""
    lines = ["| task | method | factor | length | depth | metric | A | B | verdict | detail |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]  # fmt: skip
    for p in pairs:
        if p.verdict == "unpaired":
            continue
        lines.append(f"| {p.task} | {p.label} | {p.factor or '-'} | {p.length} | {p.depth or '-'} | {p.metric} | {_num(p.a, p.metric)} | {_num(p.b, p.metric)} | "
                     f"{p.verdict} | {p.detail} |")  # fmt: skip
    return "\n".join(lines + ([""] + [f"note: {n}" for n in notes] if notes else []) + [""])


def _num(x: float | None, metric: str) -> str:
    if x is None:
        return "-"
    return f"{x:.0%}" if metric == "accuracy" else f"{x:.4g}"
