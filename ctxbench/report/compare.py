"""Regression gate: join two results files cell by cell and flag what got worse.

Compared values are each task's headline aggregates (``ppl`` over documents, ``accuracy`` per
cell), the proxy metrics a cell holds in both files (``--metrics``: ``answer_nll``, ``longppl``,
``kl``; lower is better, compared relatively) and the effective length of every method. Cells
match on their identity across machines (:func:`ctxbench.results.identity.table_view_key`: model and
dataset names, task, variant, method label and parameters, factor, length, stride, depth, seed,
dtype and the task options that change numbers; ``--metrics`` only adds rows, so a cell run with
it meets the cell run without it, and a proxy measured in one file only is noted, not compared).
Where a file holds a cell twice (a rerun appended), its later rows stand for it.
Two kinds of pair are judged differently:

- **A rerun** — the cell's model and data digests are the same in both files. Same weights, same
  tokens, same seeds: there is no run-to-run noise, so every change is real. The cell is
  *worse* when its value moved the wrong way by more than ``rtol`` (relative for values, absolute
  points for fractions), and a retrieval trial that went from right to wrong on the same seed is
  named. Any smaller change beyond floating-point tolerance (:data:`FP_RTOL`) is *changed*: shown,
  and a failure with ``strict``.
- **Different weights or data** — digests differ: the size test AND a noise test. Where both files
  hold the cell's per-trial rows on the same seeds, the noise test is the paired exact McNemar
  test on those trials (:mod:`ctxbench.report.paired`, p < 0.05); otherwise the two 95% intervals must
  not overlap (:func:`ctxbench.stats.changed_beyond_noise`).

Whatever the kind: a value no run can produce (outside its metric's domain or its own interval,
:func:`ctxbench.tasks.base.check_records`) in either file is refused before anything is judged,
naming the file and the cell (exit 2); a value that is NaN, infinite or not a number in NEW where
BASE had a number *failed*; a cell that failed in NEW (``oom``) or is missing from NEW fails; a cell left partial
by a hand edit is not compared (a note names it); an effective length that shrank is *worse*.
Cells of different dtypes never match: a note says so instead of comparing bf16 with float32
(they show as missing/new, so the gate fails). ``across_dtypes`` (``--across-dtypes``) matches them
anyway, for checking a faster dtype against a float32 baseline: such a pair is never a rerun (the
numbers move by rounding alone), so it is judged as different weights are, by the size test and the
noise test, and the table names both dtypes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ctxbench.errors import UserError
from ctxbench.parsing import len_label
from ctxbench.report.effective import check_threshold
from ctxbench.report.formats import pivots
from ctxbench.report.pivot import effective_all_pass
from ctxbench.results.identity import SETTING, VIEW, field, paired_setting, table_view_key
from ctxbench.results.store import load_results
from ctxbench.tasks import registry
from ctxbench.tasks.base import Headline, headline_of
from ctxbench.tasks.proxy import HIGHER_IS_BETTER
from ctxbench.textsafe import md_cell, md_line

# Relative change below which two floats are the same number (a rerun prints exactly the same
# digits; another CPU's summation order moves the ~7th significant digit of a float32 loss).
FP_RTOL = 1e-9
BAD = ("worse", "missing", "failed")


@dataclass(frozen=True)
class Change:
    key: dict
    base: float | None
    new: float | None
    status: str  # ok | worse | better | changed | missing | new | failed
    reason: str = ""
    base_ci: tuple | None = None
    new_ci: tuple | None = None
    base_all_pass: bool = False  # an effective length that is the longest length measured: shown as ≥
    new_all_pass: bool = False

    @property
    def delta(self) -> float | None:
        if self.base is None or self.new is None:
            return None
        return self.new - self.base


def _cells(records: list[dict], tasks, across_dtypes: bool = False) -> tuple[dict, dict, dict]:
    """Per view key and metric: the compared row (headline or proxy aggregate, or the failure
    row), its interval bounds, and the headline's per-trial rows (for naming flipped trials and the
    paired test). Later rows replace earlier ones of the same cell. With ``across_dtypes`` the
    key's dtype is blank, so cells of two dtypes meet."""

    at = VIEW.index("dtype")
    out: dict[tuple[str, ...], dict[str, str]] = {}  # cell -> its headline row
    bounds: dict[tuple[str, ...], dict[str, float | None]] = {}  # cell -> {"lo": ..., "hi": ...}
    trials: dict[tuple[str, ...], dict[tuple[str, str, str], dict[str, str]]] = {}  # cell -> its trial rows
    # One pass, O(rows): a cell's view key is normalised once, from the first row with its raw
    # values (the key reads only VIEW's columns, task among them); the rest look it up (9k cells of
    # 100k rows took 74 s when every row normalised 13 columns and parsed its options).
    views: dict[tuple, tuple] = {}
    heads: dict[str, str] = {}
    for r in records:
        raw = tuple(r.get(c, "") for c in VIEW)
        view = views.get(raw)
        if view is None:
            view = table_view_key(r, tasks)
            view = views[raw] = (*view[:at], "", *view[at + 1 :]) if across_dtypes else view
        head = heads.get(r["task"])
        if head is None:
            head = heads[r["task"]] = headline_of(r["task"], tasks).metric
        aggregate = r.get("doc", "") in ("", "all") and r.get("trial", "") in ("", "all")
        name = r["metric"]
        base_name = name[:-3] if name.endswith(("_lo", "_hi")) else name
        if r["status"] != "ok" or (aggregate and name == head):
            out[(*view, head)] = r
        elif aggregate and name in HIGHER_IS_BETTER:
            out[(*view, name)] = r
        elif aggregate and base_name in (head, *HIGHER_IS_BETTER) and base_name != name:
            bounds.setdefault((*view, base_name), {})[name[-2:]] = _number(r)[0]
        elif str(r.get("trial", "")).isdigit():
            trials.setdefault((*view, head), {})[_trial_key(r)] = r  # a rerun's trial replaces the earlier one
    names = [*VIEW, "metric"]
    return ({k: (dict(zip(names, k, strict=True)), r) for k, r in out.items()}, bounds,
            {k: list(v.values()) for k, v in trials.items()})  # fmt: skip


def _sides_differ(base: dict, new: dict, tasks) -> list[str]:
    """One line per task and variant whose cells in the two files differ only in an option compared
    side by side (the prompt mode, :func:`ctxbench.results.identity.paired_setting`): they are
    different cells, so ``compare`` does not pair them (each is missing from the other file), and
    says why rather than only that."""
    def free(cells: dict, other: dict) -> dict:
        out: dict[tuple[Any, ...], set[str]] = {}
        for key, (info, r) in cells.items():
            if key in other:
                continue
            setting, side = paired_setting(r, tasks)
            if side:
                rest = tuple(field(r, c) for c in ("model", "task", "variant", "label", "factor", "length", "depth"))
                out.setdefault((*rest, setting, info["metric"]), set()).add(side)
        return out

    only_base, only_new = free(base, new), free(new, base)
    said: dict[tuple[str, str, str, str], None] = {}
    for k in only_base.keys() & only_new.keys():
        a, b = " and ".join(sorted(only_base[k])), " and ".join(sorted(only_new[k]))
        if a != b:
            said.setdefault((k[1], k[2], a, b), None)
    return [f"{task}{' ' + variant if variant else ''}: BASE ran prompt mode {a}, NEW {b}; those cells are not paired "
            "(compare runs of one mode, or rank both modes of one file)" for task, variant, a, b in said]  # fmt: skip


RTOL = 0.02  # the default tolerance of a rerun: relative for values, absolute points for fractions


def check_rtol(rtol: float) -> None:
    """``--rtol``: a finite number >= 0, in every mode of the gate (one parser for the option)."""
    if not rtol >= 0 or math.isinf(rtol):
        raise UserError(f"--rtol {rtol} must be a finite number >= 0", "e.g. --rtol 0.02 (2%)")


def check_mode(across_backends: bool, rtol: float | None, threshold: float | None, strict: bool, across_dtypes: bool) -> None:
    """Every option of the gate either applies in the chosen mode or is refused here, before
    either file is read: ``--across-backends`` takes ``--rtol`` (one tolerance for ppl and the
    answer NLL instead of the bf16 defaults) and ``--strict`` (any discordant trial and any
    unpaired cell fail); ``--threshold`` (effective length, which parity does not judge) and
    ``--across-dtypes`` (parity always pairs an engine's dtype with the reference's) are refused."""
    if rtol is not None:
        check_rtol(rtol)
    check_threshold(threshold)
    if not across_backends:
        return
    if threshold is not None:
        raise UserError("--threshold does not apply with --across-backends: parity judges each cell, not effective lengths",
                        "drop --threshold, or compare without --across-backends")  # fmt: skip
    if across_dtypes:
        raise UserError("--across-dtypes does not apply with --across-backends: parity already pairs a cell's dtype on one "
                        "backend with its dtype on the other", "drop --across-dtypes")  # fmt: skip


def compare(base_path: str, new_path: str, rtol: float = RTOL, threshold: float | None = None,
            across_dtypes: bool = False) -> tuple[list[Change], list[str]]:  # fmt: skip
    """Per-cell changes and notes; raises UserError for unreadable or foreign files. With
    ``across_dtypes``, cells that differ only in dtype are compared (never as reruns)."""

    check_rtol(rtol)
    check_threshold(threshold)
    tasks = registry()
    notes = []
    loaded = []
    for path in (base_path, new_path):
        records, partial = load_results(path, tasks)  # the one validated reader: kind, size, encoding, domains, conflicts
        if partial:
            notes.append(f"{path}: {len(partial)} partial cell(s) not compared ({'; '.join(partial[:3])}): rows are missing (a hand edit?)")
        loaded.append(records)
    base_records, new_records = loaded
    (base, base_b, base_t), (new, new_b, new_t) = _cells(base_records, tasks, across_dtypes), _cells(new_records, tasks, across_dtypes)
    if not base:
        raise UserError(f"'{base_path}' has no aggregate rows", "give a CSV written by ctxbench")
    digests = lambda cells: {(r["model_digest"], r["data_digest"]) for _, r in cells.values()}  # noqa: E731
    if digests(base) != digests(new):
        notes.append("model or data digests differ between some cells (different weights, or another Python's stdlib corpus): "
                     "those are judged beyond noise, the rest as reruns")  # fmt: skip
    notes += _dtypes_met(base, new) if across_dtypes else _dtype_note(base, new)
    changes = []
    one_sided: dict[str, int] = {}
    for key in sorted(base.keys() | new.keys(), key=lambda k: tuple(map(str, k))):
        info = (base.get(key) or new[key])[0]  # (the key is one of theirs)
        b, n = (base.get(key) or (None, None))[1], (new.get(key) or (None, None))[1]
        head = headline_of(info["task"], tasks)
        if info["metric"] != head.metric:  # a proxy metric (``_cells`` keys no other): lower is better, a relative number
            if b is None or n is None:
                one_sided[info["metric"]] = one_sided.get(info["metric"], 0) + 1  # asked for in one run only
                continue
            head = Headline(info["metric"], HIGHER_IS_BETTER[info["metric"]], False)
        if n is None:
            changes.append(Change(info, _number(b)[0], None, "missing", "cell missing from NEW"))
            continue
        if b is None:
            changes.append(Change(info, None, _number(n)[0], "new"))
            continue
        if n["status"] != "ok":
            changes.append(Change(info, _number(b)[0], None, "failed" if b["status"] == "ok" else "ok", f"status {n['status']} in NEW"))
            continue
        (bv, _), (nv, nbad) = _number(b), _number(n)
        if nbad and bv is not None:
            changes.append(Change(info, bv, None, "failed", f"value is {nbad} in NEW where BASE had {bv:.6g}"))
            continue
        bci, nci = _ci(base_b.get(key)), _ci(new_b.get(key))
        rerun = (b["model_digest"], b["data_digest"], b["dtype"]) == (n["model_digest"], n["data_digest"], n["dtype"])
        if b["dtype"] != n["dtype"]:
            info = {**info, "dtype": f"{b['dtype']} -> {n['dtype']}"}
        status, reason = _verdict(head, bv, nv, rtol, bci, nci, rerun, base_t.get(key, []), new_t.get(key, []))
        changes.append(Change(info, bv, nv, status, reason, bci, nci))
    notes += [f"{metric}: measured in one file only for {k} cell(s), not compared (run both with --metrics {metric})"
              for metric, k in sorted(one_sided.items())]  # fmt: skip
    notes += _sides_differ(base, new, tasks)
    changes += _effective_changes(base_records, new_records, tasks, threshold, across_dtypes)
    return changes, notes


def _dtypes_met(base: dict, new: dict) -> list[str]:
    """With ``across_dtypes``: which dtypes were compared with which, said once."""
    pairs = sorted({(b["dtype"], new[k][1]["dtype"]) for k, (_, b) in base.items() if k in new})
    pairs = [(bd, nd) for bd, nd in pairs if bd != nd]
    return [f"--across-dtypes: {bd} cells in BASE are compared with {nd} cells in NEW, beyond noise and never as reruns "
            f"(rounding alone moves every number)" for bd, nd in pairs]  # fmt: skip


def _dtype_note(base: dict, new: dict) -> list[str]:
    """Cells that would match but for their dtype: say so rather than compare them."""
    def without_dtype(cells):
        return {tuple(v for c, v in info.items() if c != "dtype"): info["dtype"] for info, _ in cells.values()}

    b, n = without_dtype(base), without_dtype(new)
    pairs = sorted({(b[k], n[k]) for k in b.keys() & n.keys() if b[k] != n[k]})
    return [f"cells in {bd} in BASE are {nd} in NEW: cells of different dtypes are not compared (they show as missing/new); "
            f"compare files of one dtype, or pass --across-dtypes" for bd, nd in pairs]  # fmt: skip


def _ci(b: dict | None) -> tuple | None:
    if not b or b.get("lo") is None or b.get("hi") is None:
        return None
    return (b["lo"], b["hi"])


def _number(record: dict | None) -> tuple[float | None, str]:
    """(value, what is wrong with it): ``(None, "nan")``, ``"inf"`` or ``"not a number ('x')"``
    for a value that is not a finite number, ``(None, "")`` for an empty one."""
    if record is None:
        return None, ""
    text = str(record.get("value", "")).strip()
    if text == "":
        return None, "empty"
    try:
        value = float(text)
    except ValueError:
        return None, f"not a number ('{text[:20]}')"
    if math.isnan(value):
        return None, "nan"
    if math.isinf(value):
        return None, "inf"
    return value, ""


def _verdict(head, base, new, rtol, bci, nci, rerun, base_trials, new_trials) -> tuple[str, str]:
    from ctxbench.stats import changed_beyond_noise  # start-up: loads numpy

    if base is None or new is None:
        return "ok", ""
    relative = not head.fraction
    delta = new - base
    worse_way = delta < 0 if head.higher_is_better else delta > 0
    size = abs(delta) / abs(base) if relative and base else abs(delta)
    flipped = _flipped(base_trials, new_trials)
    if rerun:
        if size > rtol:
            what = f"{delta / base:+.2%}" if relative and base else f"{delta * 100:+.1f} pts" if head.fraction else f"{delta:+.4g}"
            reason = f"rerun on the same weights and data: {what}, beyond rtol {rtol:g}"
            if flipped:
                reason += f"; right -> wrong: {flipped}"
            return ("worse" if worse_way else "better"), reason
        if abs(delta) > FP_RTOL * max(abs(base), abs(new), 1e-300):
            reason = f"rerun on the same weights and data: moved by {delta:+.3g} ({delta / base:+.2e} relative)" if base else f"moved by {delta:+.3g}"
            if flipped:
                reason += f"; right -> wrong: {flipped}"
            return "changed", reason
        return "ok", ""
    paired = _paired_p(base_trials, new_trials)
    if paired is not None:
        if size <= rtol:
            return "ok", f"within rtol {rtol:g}"
        if paired >= 0.05:
            return "ok", f"paired McNemar p = {paired:.3g} on the same trials (within noise)"
        reason = f"paired McNemar p = {paired:.3g} on the same trials" + (f"; right -> wrong: {flipped}" if flipped and worse_way else "")
        return ("worse" if worse_way else "better"), reason
    base_lo, base_hi = bci or (None, None)
    new_lo, new_hi = nci or (None, None)
    return changed_beyond_noise(base, base_lo, base_hi, new, new_lo, new_hi, rtol, not head.higher_is_better, relative)


def _trial_key(r: dict) -> tuple:
    return (r.get("depth", ""), str(r["trial"]), r["metric"])


def _flipped(base_trials: list[dict], new_trials: list[dict]) -> str:
    """The trials that were right in BASE and wrong in NEW, on the same seed (``depth 0.5 trial 3``)."""
    new = {_trial_key(r): r for r in new_trials}
    out = []
    for r in base_trials:
        other = new.get(_trial_key(r))
        if other is None:
            continue
        (b, _), (n, _) = _number(r), _number(other)
        if b is not None and n is not None and n < b:
            out.append((f"depth {r['depth']} " if r.get("depth") else "") + f"trial {r['trial']}")
    return ", ".join(out[:10]) + (f" (+{len(out) - 10} more)" if len(out) > 10 else "")


def _paired_p(base_trials: list[dict], new_trials: list[dict]) -> float | None:
    """The exact McNemar p-value of 0/1 trial outcomes on the same trials of both files, or None
    when they do not hold the same trials."""
    if not base_trials or len(base_trials) != len(new_trials):
        return None
    new = {_trial_key(r): _number(r)[0] for r in new_trials}
    pairs = [(_number(r)[0], new.get(_trial_key(r))) for r in base_trials]
    both = [(b, n) for b, n in pairs if b is not None and n is not None]
    if len(both) != len(pairs) or any(b not in (0, 1) or n not in (0, 1) for b, n in both):
        return None
    from ctxbench.stats import mcnemar_exact  # start-up: loads numpy

    return mcnemar_exact(sum(1 for b, n in both if b > n), sum(1 for b, n in both if n > b))



def _effective_changes(base_records, new_records, tasks, threshold, across_dtypes: bool = False) -> list[Change]:
    """An effective length that shrank makes the method's row worse (of one dtype in both files,
    as the cells are, unless ``across_dtypes``)."""

    def lengths(records):
        out = {}
        for p in pivots(records, tasks, threshold=threshold, check=False):  # compare checked each file, naming it
            dtype = "" if across_dtypes or not p.key else p.key[SETTING.index("dtype")]
            for label, eff in p.effective.items():
                out[(p.model, p.task, p.variant, p.setting, label, p.factor, dtype)] = eff, effective_all_pass(p, label)
        return out

    base, new = lengths(base_records), lengths(new_records)
    changes = []
    for key in sorted(base.keys() & new.keys(), key=lambda k: tuple(map(str, k))):
        (b, b_all), (n, n_all) = base[key], new[key]
        info = dict(model=key[0], task=key[1], variant=key[2], label=key[4], factor=key[5], length="", depth="", metric="effective_length")
        if b is not None and (n is None or n < b):
            changes.append(Change(info, b, n, "worse", f"effective length shrank from {b} to {n or 'none'}", base_all_pass=b_all, new_all_pass=n_all))
        else:
            changes.append(Change(info, b, n, "better" if (n or 0) > (b or 0) else "ok", base_all_pass=b_all, new_all_pass=n_all))
    return changes


def failed(changes: list[Change], strict: bool = False) -> bool:
    return any(c.status in BAD or (strict and c.status == "changed") for c in changes)


def to_markdown(changes: list[Change], notes: list[str], rtol: float, strict: bool = False) -> str:
    bad = [c for c in changes if c.status in BAD or (strict and c.status == "changed")]
    moved = sum(1 for c in changes if c.status == "changed")
    head = (f"### ctxbench compare: {'FAIL' if bad else 'PASS'} — {len(bad)} of {len(changes)} cells worse (rtol {rtol:g})"
            + (f", {moved} changed" if moved else "") + "\n")  # fmt: skip
    lines = [head, *[f"> {md_line(n)}" for n in notes], "",
             "| task | method | factor | length | depth | metric | base | new | change | status | why |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for c in changes:
        flag = c.status in BAD or (strict and c.status == "changed")
        lines.append("| " + " | ".join(md_cell(x) for x in [
            c.key["task"] + (f" {c.key['variant']}" if c.key.get("variant") else ""), c.key["label"], c.key["factor"] or "any",
            c.key["length"], c.key["depth"] or "—", c.key["metric"], fmt(c.base, c.base_ci, c.key["metric"], c.base_all_pass), fmt(c.new, c.new_ci, c.key["metric"], c.new_all_pass), pct(c),
            ("**" + c.status + "**") if flag else c.status, c.reason,
        ]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def fmt(value: float | None, ci: tuple | None = None, metric: str = "", all_pass: bool = False) -> str:
    """A compared value; an effective length that is the longest length measured reads ``≥16k``."""
    if value is None:
        return "—"
    if metric == "effective_length":
        return ("≥" if all_pass else "") + len_label(int(value))
    text = f"{value:.4g}"
    return text + (f" [{ci[0]:.4g}–{ci[1]:.4g}]" if ci else "")


def pct(c: Change) -> str:
    if c.delta is None:
        return "—"
    if c.key["metric"] == "effective_length" and c.delta:

        return ("+" if c.delta > 0 else "-") + len_label(abs(int(c.delta)))
    if c.key["metric"] == "ppl" and c.base:
        return f"{100 * c.delta / c.base:+.2f}%"
    return f"{c.delta:+.3g}"
