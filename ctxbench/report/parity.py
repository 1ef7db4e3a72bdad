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
pair ``differs`` or ``failed`` (a value that is NaN or blank), and when nothing is paired at all
(two models, two tasks, two grids: the gate never passes having compared nothing).

This is a mode of the one gate (:mod:`ctxbench.report.compare`): both files are read by the one
validated reader (:func:`ctxbench.results.store.load_results`: a regular file under a ceiling,
UTF-8, each metric in its domain, a value given twice with another value a named conflict), and
the gate's options either apply here (``--rtol`` replaces :data:`RTOL`; ``--strict`` fails any
discordant trial and any unpaired cell) or are refused (:func:`ctxbench.report.compare.check_mode`).
Within one file, cells of two dtypes (or two models) stay two cells: across the files a cell meets
its own dtype where both files hold it, else the one dtype each file holds (an engine's bf16
against the float32 reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.errors import UserError
from ctxbench.results.identity import VIEW, table_view_key
from ctxbench.results.store import load_results
from ctxbench.tasks import registry
from ctxbench.tasks.base import extra_of

# Relative tolerance of a loss aggregate between a bf16 engine and the float32 reference: bf16 keeps
# 8 significant bits (2^-8 = 0.4% per value); over thousands of tokens the errors average out, and
# what is left is the engine's other kernels and the rounding of the weights (measured: see docs).
RTOL = {"ppl": 0.01, "answer_nll": 0.05}
ALPHA = 0.05  # McNemar's level for a retrieval cell
NOT_PAIRED = ("backend", "dtype")
BAD = ("differs", "failed")


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
    verdict: str  # same | differs | failed | unpaired
    detail: str  # "10/10 same answers, McNemar p = 1" or "+0.31% (tolerance 2%)"
    backends: tuple[str, str] = ("", "")
    same: int = 0  # retrieval: trials with the same answer on both backends (same_answer)
    trials: int = 0  # retrieval: trials in both files
    same_score: int = 0  # retrieval: trials the task's scorer scores the same on both backends


def _key(record: dict, tasks) -> tuple[tuple, str]:
    """(the paired key: the view without backend and dtype, the dtype): a file's cells of two
    dtypes stay apart, and meet the other file's by :func:`_match`."""
    view = table_view_key(record, tasks)
    return tuple(v for c, v in zip(VIEW, view, strict=True) if c not in NOT_PAIRED), view[VIEW.index("dtype")]


def _value(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _cells(records: list[dict], tasks) -> dict:
    """Per paired key, per dtype: {"backend", "dtype", "agg": {metric: value}, "trials": {(depth,
    trial): (score, answer)}, "bad": [what is not a number]}. The reader refused every value
    outside its domain and every conflict; what is left to say here is NaN or blank."""
    out: dict = {}
    for r in records:
        if r.get("status", "ok") != "ok":
            continue
        key, dtype = _key(r, tasks)
        cell = out.setdefault(key, {}).setdefault(dtype, {"backend": r.get("backend") or DEFAULT_BACKEND, "dtype": dtype, "agg": {}, "trials": {},
                                                           "bad": []})  # fmt: skip
        trial, doc, metric = str(r.get("trial", "")), r.get("doc", ""), r["metric"]
        is_trial = trial.isdigit() and metric in ("correct", "score")
        is_agg = trial in ("", "all") and doc in ("", "all") and metric in ("ppl", "answer_nll")
        if not (is_trial or is_agg):
            continue
        value = _value(r.get("value", ""))
        if value is None:
            cell["bad"].append(f"{metric} {'trial ' + trial + ' ' if is_trial else ''}is {r.get('value', '').strip() or 'blank'}")
            continue
        if is_trial:
            cell["trials"][(r.get("depth", ""), trial)] = (value, r.get("answer", ""))
            nll = extra_of(r).get("answer_nll")  # the reader checked it: a finite number >= 0, or absent
            if nll is not None:
                cell.setdefault("trial_nll", {})[(r.get("depth", ""), trial)] = float(nll)
        else:
            cell["agg"][metric] = value
    return out


def _match(a: dict, b: dict) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Which dtype of A meets which of B for one key: the same dtype where both hold it, else the
    one dtype each file holds; and the dtypes left over on each side."""
    same = sorted(a.keys() & b.keys())
    if same:
        return [(d, d) for d in same], sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    if len(a) == 1 and len(b) == 1:
        return [(next(iter(a)), next(iter(b)))], [], []
    return [], sorted(a), sorted(b)


def parity(a_path: str, b_path: str, rtol: float | None = None, strict: bool = False) -> tuple[list[Pair], list[str]]:
    """The pairs of cells of two results files, each with its verdict, and notes for people.
    ``rtol``: one relative tolerance for ppl and answer NLL instead of :data:`RTOL`; ``strict``:
    a retrieval cell with any discordant trial differs."""
    from ctxbench.stats import mcnemar_exact  # start-up: loads numpy
    tasks = registry()
    loaded = [load_results(path, tasks) for path in (a_path, b_path)]
    notes = [f"{path}: {len(bad)} partial cell(s) not paired ({'; '.join(bad[:3])})" for path, (_, bad) in zip((a_path, b_path), loaded, strict=True) if bad]
    a_cells, b_cells = (_cells(records, tasks) for records, _ in loaded)
    if not a_cells or not b_cells:
        raise UserError(f"'{a_path if not a_cells else b_path}' holds no finished cell", "give two results CSVs of the same grid")
    tol = dict(RTOL) if rtol is None else {metric: rtol for metric in RTOL}
    pairs: list[Pair] = []
    where = {c: i for i, c in enumerate(VIEW) if c not in NOT_PAIRED}
    at = {c: list(where).index(c) for c in ("task", "label", "factor", "length", "depth")}

    def fields(key):
        return {c: key[i] for c, i in at.items()}

    def unpaired(f, one: dict, detail: str) -> Pair:
        metric = "accuracy" if one["trials"] else next(iter(one["agg"]), "")
        return Pair(**f, metric=metric, a=None, b=None, verdict="unpaired", detail=detail)

    same_backend = 0
    for key in sorted(set(a_cells) | set(b_cells), key=lambda k: tuple(_sortable(x) for x in k)):
        f = fields(key)
        a_dtypes, b_dtypes = a_cells.get(key, {}), b_cells.get(key, {})
        matched, a_left, b_left = _match(a_dtypes, b_dtypes)
        pairs += [unpaired(f, a_dtypes[d], f"only in {a_path}" + (f" ({d})" if d else "")) for d in a_left]
        pairs += [unpaired(f, b_dtypes[d], f"only in {b_path}" + (f" ({d})" if d else "")) for d in b_left]
        for da, db in matched:
            a, b = a_dtypes[da], b_dtypes[db]
            if a["backend"] == b["backend"]:
                same_backend += 1
            backends = (f"{a['backend']} {a['dtype']}", f"{b['backend']} {b['dtype']}")
            if a["bad"] or b["bad"]:
                which = "; ".join([f"{x} in {a_path}" for x in a["bad"][:2]] + [f"{x} in {b_path}" for x in b["bad"][:2]])
                metric = "accuracy" if a["trials"] or b["trials"] else next(iter(a["agg"] or b["agg"]), "ppl")
                pairs.append(Pair(**f, metric=metric, a=None, b=None, verdict="failed", detail=f"not a number: {which}", backends=backends))
                continue
            if a["trials"] or b["trials"]:
                pairs.append(_retrieval(f, a, b, backends, strict, mcnemar_exact))
            for metric in ("ppl", "answer_nll"):
                x, y = a["agg"].get(metric), b["agg"].get(metric)
                if x is None or y is None:
                    continue
                rel = (y - x) / abs(x) if x else (0.0 if y == x else math.inf)
                verdict = "same" if abs(rel) <= tol[metric] else "differs"
                pairs.append(Pair(**f, metric=metric, a=x, b=y, verdict=verdict, detail=f"{rel:+.2%} (tolerance {_pct(tol[metric])})",
                                  backends=backends))  # fmt: skip
    if same_backend:
        notes.append(f"{same_backend} paired cell(s) ran on the same backend in both files: this compares backends only where they differ")
    return pairs, notes


def _retrieval(f: dict, a: dict, b: dict, backends, strict: bool, mcnemar_exact) -> Pair:
    common = sorted(set(a["trials"]) & set(b["trials"]))
    if not common:
        return Pair(**f, metric="accuracy", a=None, b=None, verdict="unpaired", detail="no trial in both files", backends=backends)
    ra = [a["trials"][t][0] >= 1 for t in common]
    rb = [b["trials"][t][0] >= 1 for t in common]
    agree = sum(same_answer(a["trials"][t][1], b["trials"][t][1]) for t in common)
    scored = sum(a["trials"][t][0] == b["trials"][t][0] for t in common)
    right_wrong = sum(x and not y for x, y in zip(ra, rb, strict=True))
    wrong_right = sum(y and not x for x, y in zip(ra, rb, strict=True))
    p = mcnemar_exact(right_wrong, wrong_right)
    verdict = "differs" if p < ALPHA or (strict and scored < len(common)) else "same"
    return Pair(**f, metric="accuracy", a=sum(ra) / len(ra), b=sum(rb) / len(rb), verdict=verdict,
                detail=f"{agree}/{len(common)} same answers ({scored}/{len(common)} same score), "
                       f"{right_wrong + wrong_right} discordant, McNemar p = {p:.3g}" + (" (--strict: any other score differs)" if strict and scored < len(common) else ""),
                backends=backends, same=agree, trials=len(common), same_score=scored)  # fmt: skip


def _pct(x: float) -> str:
    """A tolerance as people write it: ``1%``, ``2.5%``, ``0%``."""
    return f"{x * 100:.4g}%"


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


def differs(pairs: list[Pair], strict: bool = False) -> bool:
    """The gate fails: a pair differs or failed, nothing was paired at all, or (``strict``) a cell is unpaired."""
    return any(p.verdict in BAD for p in pairs) or not judged(pairs) or (strict and any(p.verdict == "unpaired" for p in pairs))


def judged(pairs: list[Pair]) -> list[Pair]:
    return [p for p in pairs if p.verdict != "unpaired"]


def nothing_paired(a_path: str, b_path: str) -> str:
    """Why no cell of A met one of B, for the failure line: two models, two tasks, two datasets, or
    the same of each on another grid."""
    tasks = registry()
    records = [load_results(path, tasks)[0] for path in (a_path, b_path)]
    for column, what in (("model", "model"), ("task", "task"), ("dataset", "dataset")):
        held = [sorted({r.get(column, "") for r in rs}) for rs in records]
        if not set(held[0]) & set(held[1]):
            return f"{a_path} holds {what} {', '.join(held[0])} and {b_path} holds {', '.join(held[1])}: no cell is in both"
    return (f"no cell of {a_path} is in {b_path} (other methods, factors, lengths, depths, seeds or options): "
            "run the same grid on both backends")


def unpaired_lines(pairs: list[Pair], most: int = 10) -> list[str]:
    """The unpaired cells, one line each (at most ``most``, then how many more)."""
    out = [f"unpaired: {p.task} {p.label}" + (f" x{p.factor}" if p.factor else "") + f" at length {p.length}"
           + (f" depth {p.depth}" if p.depth else "") + f" ({p.detail})" for p in pairs if p.verdict == "unpaired"]  # fmt: skip
    return out[:most] + ([f"unpaired: {len(out) - most} more"] if len(out) > most else [])


def summary(pairs: list[Pair]) -> str:
    """One line: pairs judged the same, per metric, and the share of same answers over every trial."""
    done = judged(pairs)
    same = sum(p.verdict == "same" for p in done)
    return f"{same}/{len(done)} paired cells the same within tolerance ({len(pairs) - len(done)} unpaired)"


def to_markdown(pairs: list[Pair], notes: list[str]) -> str:
    """The parity table as Markdown (the README's and docs' table is this, generated)."""
    lines = ["| task | method | factor | length | depth | metric | A | B | verdict | detail |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]  # fmt: skip
    for p in pairs:
        if p.verdict == "unpaired":
            continue
        lines.append(f"| {p.task} | {p.label} | {p.factor or '-'} | {p.length} | {p.depth or '-'} | {p.metric} | {value_text(p.a, p.metric)} | {value_text(p.b, p.metric)} | "
                     f"{p.verdict} | {p.detail} |")  # fmt: skip
    return "\n".join(lines + ([""] + [f"note: {n}" for n in notes] if notes else []) + [""])


def value_text(x: float | None, metric: str) -> str:
    """A cell's value as the parity table shows it: a percentage for accuracy, 4 significant digits
    otherwise, ``-`` where the cell has none."""
    if x is None:
        return "-"
    return f"{x:.0%}" if metric == "accuracy" else f"{x:.4g}"
