"""Paired comparisons of methods on the same documents, blocks and trials (issue 22).

Every method of one results file sees the very same documents, seeds, depths and trials, so
much of what varies between units (one document is harder than another, one needle is easier)
is shared by all methods. Per-method intervals (:mod:`ctxbench.stats`) carry that shared noise
twice; paired statistics take the difference *unit by unit* first, so it cancels.

Units
    * Perplexity (``ppl``): each document's per-document ``nll`` row (its mean NLL and its token
      count ``tokens``) gives its summed NLL; both methods must have scored the same documents
      with the same token counts. With a single document, its loss-by-position buckets (the
      ``nll_pos`` rows, ``[pos_start, pos_end)`` or ``extra.pos`` in older files) are the units:
      a block bootstrap over contiguous blocks of positions (Kuensch 1989, "The jackknife and the
      bootstrap for general stationary observations", Ann. Statist. 17:1217-1241), the blocks
      being the 512-position buckets the task already writes.
    * Retrieval (``passkey``, ``niah``, ``vt``, ``cwe``, ``fwe`` and any task with per-trial
      ``correct`` or ``score`` rows): each trial, matched on ``(length, depth, trial)``; the
      same seed and data digest make it the same prompt for both methods.

Estimate and interval
    ``delta`` is new minus base: for perplexity the token-weighted mean NLL difference over the
    same target tokens (nats per token; ``exp(delta)`` is the perplexity ratio new/base), for
    retrieval the mean score difference (accuracy points as a fraction). The 95% interval is a
    percentile paired bootstrap (:func:`ctxbench.stats.paired_bootstrap`): units are resampled
    with replacement, the same indices for both methods, token-weighted. Percentile rather than
    BCa: with the handful of units a cell has (4 documents, 4-64 blocks) the jackknife
    acceleration of BCa is itself unstable, and percentile matches the per-method intervals.

Test
    Perplexity and fractional scores: a two-sided sign-flip permutation test over the units
    (:func:`ctxbench.stats.sign_flip_test`, exact up to 16 nonzero units). It was chosen over a
    bootstrap p-value because it is exact under its null (the two methods exchangeable within
    each unit) at any number of units, where a bootstrap test is anti-conservative with few
    units; its smallest attainable p is ``2 / 2^n`` (``p_min``), which says plainly when a cell
    has too few units to ever separate two methods. 0/1 outcomes: the exact McNemar test
    (:func:`ctxbench.stats.mcnemar_exact`), which is the same test for binary data. Many cells:
    Holm's step-down adjustment (:func:`ctxbench.stats.holm`).

Pure functions of result records (dicts of strings, as :func:`ctxbench.results.store.read_records`
returns): numpy only, imported inside the functions that need it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxbench.errors import UserError, closest
from ctxbench.results.identity import paired_setting, unit_key, uses_factor
from ctxbench.tasks.base import check_records, extra_of

__all__ = ["Paired", "CellComparison", "Ranking", "paired_ppl", "paired_retrieval", "paired_rows", "holm", "compare_labels", "rank"]

TRIAL_METRICS = ("correct", "score")  # per-trial outcome rows of the retrieval tasks (passkey, RULER)
PERMUTATIONS = 9999  # random sign vectors when there are too many units to enumerate

TrialKey = tuple[int, "float | None", int]  # (length, depth or None, trial)


@dataclass(frozen=True)
class Paired:
    """A paired comparison of NEW against BASE on the same units.

    ``delta`` is new minus base: mean NLL difference in nats per token (``metric == "nll"``) or
    mean score difference (``metric == "score"``); ``base`` and ``new`` are the two methods' own
    values on those units (token-weighted mean NLL, or mean score). ``delta_lo``/``delta_hi``: the
    ``level`` percentile paired-bootstrap interval (NaN with fewer than two units). ``p_value``:
    two-sided, from ``test``; ``p_min`` the smallest p that test could give with these units.
    ``n`` paired units of kind ``unit`` (``"docs"``, ``"blocks"`` or ``"trials"``).
    ``right_to_wrong``/``wrong_to_right`` (retrieval): the ``(length, depth, trial)`` whose score
    fell / rose (depth ``None`` for tasks without one).
    """

    metric: str
    base: float
    new: float
    delta: float
    delta_lo: float
    delta_hi: float
    p_value: float
    n: int
    unit: str
    test: str
    p_min: float
    level: float = 0.95
    interval: str = "percentile paired bootstrap"
    right_to_wrong: tuple[TrialKey, ...] = ()
    wrong_to_right: tuple[TrialKey, ...] = ()

    @property
    def ratio(self) -> float | None:
        """Perplexity ratio new/base, ``exp(delta)`` (``None`` for scores)."""
        return math.exp(self.delta) if self.metric == "nll" else None

    @property
    def ratio_lo(self) -> float | None:
        return math.exp(self.delta_lo) if self.metric == "nll" else None

    @property
    def ratio_hi(self) -> float | None:
        return math.exp(self.delta_hi) if self.metric == "nll" else None

    @property
    def headline_base(self) -> float:
        """BASE's headline on these units: perplexity or accuracy."""
        return math.exp(self.base) if self.metric == "nll" else self.base

    @property
    def headline_new(self) -> float:
        return math.exp(self.new) if self.metric == "nll" else self.new


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values (:func:`ctxbench.stats.holm`; Holm 1979)."""
    from ctxbench.stats import holm as _holm  # start-up: loads numpy

    return _holm(p_values)


# --------------------------------------------------------------------------- reading rows


def _num(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _norm(text) -> str:
    """'2', '2.0' and 2.0 read alike; anything else as it is."""
    value = _num(text)
    if value is None:
        return "" if text is None else str(text)
    return repr(int(value)) if value.is_integer() else repr(value)


def _ok(rows: Iterable[dict]) -> list[dict]:
    return [r for r in rows if r.get("status", "ok") == "ok"]


def _bucket(record: dict) -> tuple[int, int] | None:
    """A loss-by-position row's ``[start, end)``: its own columns, or ``extra.pos`` in older files."""
    if record.get("pos_start", "") not in ("", None):
        return int(float(record["pos_start"])), int(float(record["pos_end"]))
    pos = extra_of(record).get("pos")
    if isinstance(pos, list) and len(pos) == 2 and None not in pos:
        return int(pos[0]), int(pos[1])
    return None


def _who(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    r = rows[0]
    label = r.get("label") or r.get("method", "?")
    factor = f" x{_norm(r['factor'])}" if r.get("factor", "") != "" else ""
    return f"'{label}'{factor}"


def _doc_units(rows: list[dict]) -> dict[tuple[str, str], tuple[float, int]]:
    """(length, doc) -> (summed NLL, tokens) from the per-document ``nll`` rows."""
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for r in rows:
        if r.get("doc", "") in ("", "all") or r.get("metric") != "nll":
            continue
        key = (_norm(r.get("length", "")), r["doc"])
        if key in out:
            raise UserError(
                f"{_who(rows)} has two 'nll' rows for document '{r['doc']}' at length {key[0]}",
                "pass the rows of one cell per method (one run of it: filter by seed, stride and options)",
            )
        nll, tokens = _num(r.get("value")), _num(r.get("tokens"))
        if nll is None or tokens is None or tokens <= 0:
            raise UserError(f"{_who(rows)} document '{r['doc']}': its nll row has no value or token count", "re-run that cell")
        out[key] = (nll * tokens, int(tokens))
    return out


def _block_units(rows: list[dict]) -> dict[tuple[str, int, int], tuple[float, int]]:
    """(length, start, end) -> (summed NLL, tokens) from the loss-by-position rows."""
    out: dict[tuple[str, int, int], tuple[float, int]] = {}
    for r in rows:
        if r.get("metric") != "nll_pos" or r.get("doc", "all") not in ("", "all"):
            continue
        span = _bucket(r)
        nll, tokens = _num(r.get("value")), _num(r.get("tokens"))
        if span is None or nll is None or tokens is None or tokens <= 0:
            continue
        key = (_norm(r.get("length", "")), *span)
        if key in out:
            raise UserError(f"{_who(rows)} has two nll_pos rows for positions [{span[0]}, {span[1]}) at length {key[0]}",
                            "pass the rows of one cell per method")  # fmt: skip
        out[key] = (nll * tokens, int(tokens))
    return out


def _trial_units(rows: list[dict]) -> tuple[dict[TrialKey, float], dict[TrialKey, dict]]:
    """(length, depth, trial) -> score from the per-trial rows, and the row of each."""
    scores: dict[TrialKey, float] = {}
    source: dict[TrialKey, dict] = {}
    for r in rows:
        if r.get("trial", "") in ("", "all") or r.get("metric") not in TRIAL_METRICS:
            continue
        value = _num(r.get("value"))
        if value is None:
            raise UserError(f"{_who(rows)} trial {r['trial']}: its {r['metric']} row has no value", "re-run that cell")
        depth = _num(r.get("depth"))
        key = (int(float(r["length"])), depth, int(float(r["trial"])))
        if key in scores:
            raise UserError(f"{_who(rows)} has two rows for {_trial_text(key)}",
                            "pass the rows of one cell per method (one run of it: filter by seed and options)")  # fmt: skip
        scores[key] = value
        source[key] = r
    return scores, source


def _trial_text(key: TrialKey) -> str:
    length, depth, trial = key
    return f"trial {trial} at length {length}" + (f" depth {depth:g}" if depth is not None else "")


def _same_units(base: dict, new: dict, what: str, base_rows: list[dict], new_rows: list[dict], show) -> None:
    if set(base) == set(new):
        return
    only_base = sorted(set(base) - set(new), key=str)
    only_new = sorted(set(new) - set(base), key=str)
    parts = []
    if only_base:
        parts.append(f"{len(only_base)} only in {_who(base_rows)} (e.g. {show(only_base[0])})")
    if only_new:
        parts.append(f"{len(only_new)} only in {_who(new_rows)} (e.g. {show(only_new[0])})")
    raise UserError(
        f"{_who(new_rows)} and {_who(base_rows)} did not see the same {what}: " + "; ".join(parts),
        "compare runs of one file with the same documents, seeds, depths and trials (re-run the missing cells)",
    )


def _check_provenance(base_rows: list[dict], new_rows: list[dict]) -> None:
    """The same seed and data digest: otherwise 'the same trial' is another prompt."""
    for column in ("seed", "data_digest"):
        b = {_norm(r.get(column, "")) for r in base_rows} - {""}
        n = {_norm(r.get(column, "")) for r in new_rows} - {""}
        if b and n and b != n:
            raise UserError(
                f"{_who(new_rows)} and {_who(base_rows)} differ in {column} ({', '.join(sorted(n))} against {', '.join(sorted(b))}): "
                "their documents or trials are not the same ones",
                f"compare rows of one {column}",
            )


# --------------------------------------------------------------------------- the two comparisons


def _test(diffs, seed: int) -> tuple[float, str, float]:
    """(p, test name, smallest attainable p) of the sign-flip test over these unit differences."""
    from ctxbench.stats import sign_flip_test  # start-up: loads numpy

    p, exact = sign_flip_test(diffs, n_perm=PERMUTATIONS, seed=seed)
    m = sum(1 for d in diffs if d != 0)
    if exact:
        return p, "sign-flip permutation (exact)", min(1.0, 2.0 / 2**m) if m else 1.0
    return p, f"sign-flip permutation ({PERMUTATIONS} random signs)", 1.0 / (1 + PERMUTATIONS)


def paired_ppl(base_rows: Sequence[dict], new_rows: Sequence[dict], *, reps: int = 2000, seed: int = 0, level: float = 0.95) -> Paired:
    """Paired comparison of two methods' perplexity on the same target tokens.

    ``base_rows``/``new_rows``: each method's rows of one ``ppl`` cell (or of several lengths,
    which are then pooled). Units are documents (two or more) or, for a single document, its
    loss-by-position buckets. ``delta`` is the token-weighted mean NLL of NEW minus BASE (nats
    per token; ``exp(delta)`` is the perplexity ratio), with a ``level`` percentile paired
    bootstrap over the units (``reps`` resamples, ``seed``) and a two-sided sign-flip
    permutation p-value. Raises :class:`UserError` when the two methods did not score the same
    documents, token counts or buckets.
    """
    import numpy as np  # start-up: numpy only where it runs

    from ctxbench.stats import paired_bootstrap  # start-up: loads numpy

    base_rows, new_rows = _ok(base_rows), _ok(new_rows)
    _check_provenance(base_rows, new_rows)
    base, new = _doc_units(base_rows), _doc_units(new_rows)
    if not base or not new:
        missing = _who(base_rows) if not base else _who(new_rows)
        raise UserError(f"{missing} has no per-document nll rows", "pass the rows of a ppl cell (doc=<name>, metric nll)")
    _same_units(base, new, "documents", base_rows, new_rows, lambda k: f"'{k[1]}' at length {k[0]}")
    for key in base:
        if base[key][1] != new[key][1]:
            raise UserError(
                f"document '{key[1]}' at length {key[0]}: {base[key][1]} scored tokens in {_who(base_rows)} but {new[key][1]} in {_who(new_rows)}",
                "compare cells of the same length and stride (the same target tokens)",
            )
    unit = "docs"
    units_b: dict[tuple[Any, ...], tuple[float, int]] = base
    units_n: dict[tuple[Any, ...], tuple[float, int]] = new
    if len(base) == 1:
        blocks_b, blocks_n = _block_units(base_rows), _block_units(new_rows)
        if blocks_b or blocks_n:
            _same_units(blocks_b, blocks_n, "position buckets", base_rows, new_rows, lambda k: f"[{k[1]}, {k[2]}) at length {k[0]}")
            for bucket in blocks_b:
                if blocks_b[bucket][1] != blocks_n[bucket][1]:
                    raise UserError(f"positions [{bucket[1]}, {bucket[2]}): {blocks_b[bucket][1]} tokens in {_who(base_rows)} but {blocks_n[bucket][1]} in {_who(new_rows)}",
                                    "compare cells of the same length")  # fmt: skip
            if sum(t for _, t in blocks_b.values()) != next(iter(base.values()))[1]:
                raise UserError(f"{_who(base_rows)}: its nll_pos buckets do not add up to its document's tokens",
                                "the rows are not one cell's; re-run it")  # fmt: skip
            if len(blocks_b) >= 2:
                unit, units_b, units_n = "blocks", blocks_b, blocks_n
    keys = sorted(units_b, key=str)
    sums_b = np.array([units_b[k][0] for k in keys])
    sums_n = np.array([units_n[k][0] for k in keys])
    tokens = np.array([units_b[k][1] for k in keys], dtype=np.float64)
    total = tokens.sum()
    diffs = sums_n - sums_b
    lo, hi = paired_bootstrap(diffs, tokens, n_boot=reps, seed=seed, level=level)
    p, test, p_min = _test(list(diffs), seed)
    return Paired(
        metric="nll", base=float(sums_b.sum() / total), new=float(sums_n.sum() / total), delta=float(diffs.sum() / total),
        delta_lo=lo, delta_hi=hi, p_value=p, n=len(keys), unit=unit, test=test, p_min=p_min, level=level,
    )  # fmt: skip


def paired_retrieval(base_rows: Sequence[dict], new_rows: Sequence[dict], *, reps: int = 2000, seed: int = 0, level: float = 0.95) -> Paired:
    """Paired comparison of two methods' per-trial scores, matched on ``(length, depth, trial)``.

    ``delta`` is the mean score of NEW minus BASE over the matched trials (pooled over the depths
    and lengths given), with a ``level`` percentile paired bootstrap over trials. The test is the
    exact McNemar test when every score is 0 or 1, else (RULER's fractional string_match_all) the
    sign-flip permutation test on the per-trial differences. Where one method holds more trials
    than the other (and every trial of the other), they pair on the shared ones. ``right_to_wrong`` and
    ``wrong_to_right`` name the discordant trials. Raises :class:`UserError` when the two
    methods' trials differ.
    """
    import numpy as np  # start-up: numpy only where it runs

    from ctxbench.stats import mcnemar_exact, paired_bootstrap  # start-up: loads numpy

    base_rows, new_rows = _ok(base_rows), _ok(new_rows)
    _check_provenance(base_rows, new_rows)
    base, _ = _trial_units(base_rows)
    new, _ = _trial_units(new_rows)
    if not base or not new:
        missing = _who(base_rows) if not base else _who(new_rows)
        raise UserError(f"{missing} has no per-trial rows ({' or '.join(TRIAL_METRICS)})", "pass the rows of a retrieval cell (trial=<i>)")
    if set(base) < set(new) or set(new) < set(base):
        # one cell holds more trials (``--trials auto`` gave it more batches): trial t is the same
        # prompt in both, so they pair on the trials both hold
        base = {k: v for k, v in base.items() if k in new}
        new = {k: v for k, v in new.items() if k in base}
    _same_units(base, new, "trials", base_rows, new_rows, _trial_text)
    keys = sorted(base, key=lambda k: (k[0], -1.0 if k[1] is None else k[1], k[2]))
    b = np.array([base[k] for k in keys])
    n = np.array([new[k] for k in keys])
    diffs = n - b
    worse = tuple(k for k, d in zip(keys, diffs, strict=True) if d < 0)
    better = tuple(k for k, d in zip(keys, diffs, strict=True) if d > 0)
    lo, hi = paired_bootstrap(diffs, np.ones_like(diffs), n_boot=reps, seed=seed, level=level)
    binary = bool(np.isin(b, (0.0, 1.0)).all() and np.isin(n, (0.0, 1.0)).all())
    if binary:
        p, test = mcnemar_exact(len(worse), len(better)), "exact McNemar"
        m = len(worse) + len(better)
        p_min = min(1.0, 2.0 / 2**m) if m else 1.0
    else:
        p, test, p_min = _test(list(diffs), seed)
    return Paired(
        metric="score", base=float(b.mean()), new=float(n.mean()), delta=float(diffs.mean()), delta_lo=lo, delta_hi=hi,
        p_value=p, n=len(keys), unit="trials", test=test, p_min=p_min, level=level, right_to_wrong=worse, wrong_to_right=better,
    )  # fmt: skip


def units_of(rows: Sequence[dict]) -> list[tuple[float, float]]:
    """One cell's units as ``(sum, weight)`` pairs, the cell's value being ``sum / weight`` over
    them: trials ``(score, 1)``; documents ``(summed NLL, tokens)``, or with a single document its
    loss-by-position blocks. Empty when the rows hold no units (a summary-only cell)."""
    kind = kind_of(rows)
    if kind == "retrieval":
        return [(v, 1.0) for v in _trial_units(list(rows))[0].values()]
    if kind == "ppl":
        docs = _doc_units(list(rows))
        units = _block_units(list(rows)) if len(docs) == 1 else {}
        return [(float(s), float(w)) for s, w in (units or docs).values()]
    return []


def kind_of(rows: Iterable[dict]) -> str | None:
    """``"retrieval"`` (per-trial outcome rows), ``"ppl"`` (per-document nll rows) or ``None``
    (nothing this module can pair, e.g. the attention task)."""
    ppl = False
    for r in rows:
        if r.get("trial", "") not in ("", "all") and r.get("metric") in TRIAL_METRICS:
            return "retrieval"
        if r.get("doc", "") not in ("", "all") and r.get("metric") == "nll":
            ppl = True
    return "ppl" if ppl else None


def paired_rows(base_rows: Sequence[dict], new_rows: Sequence[dict], *, reps: int = 2000, seed: int = 0, level: float = 0.95) -> Paired:
    """:func:`paired_ppl` or :func:`paired_retrieval`, whichever the rows are."""
    kind = kind_of(base_rows)
    if kind == "retrieval":
        return paired_retrieval(base_rows, new_rows, reps=reps, seed=seed, level=level)
    if kind == "ppl":
        return paired_ppl(base_rows, new_rows, reps=reps, seed=seed, level=level)
    raise UserError(f"{_who(list(base_rows))}: no per-document nll or per-trial rows to pair", "pass rows of a ppl or retrieval cell")


# --------------------------------------------------------------------------- many cells


@dataclass(frozen=True)
class CellComparison:
    """One label against the baseline in one (model, task, variant, setting, factor, length) cell.

    ``factor`` is the comparison's factor ("" when neither side uses one); ``base_factor`` and
    ``new_factor`` each side's own ("" for a method that ignores the factor). ``setting``: the
    other identity columns the two cells share, as ``(column, value)`` pairs. ``p_holm``: the
    Holm-adjusted p-value over every comparison one :func:`compare_labels` call returned.
    """

    model: str
    task: str
    variant: str
    setting: tuple[tuple[str, str], ...]
    factor: str
    length: int
    baseline: str
    label: str
    base_factor: str
    new_factor: str
    paired: Paired
    p_holm: float

    @property
    def delta(self) -> float:
        return self.paired.delta

    @property
    def lo(self) -> float:
        return self.paired.delta_lo

    @property
    def hi(self) -> float:
        return self.paired.delta_hi

    @property
    def p(self) -> float:
        return self.paired.p_value

    @property
    def n(self) -> int:
        return self.paired.n


def _cells(records: Iterable[dict], task: Sequence[str] | str | None, tasks: dict | None = None) -> dict[tuple, dict[tuple[str, str], list[dict]]]:
    """(model, task, variant, setting, length) -> (label, factor) -> rows, whole-ok cells only.

    A cell with a row that is not ``ok`` is left out (it failed or is being re-run). When a
    merged file holds a cell twice, or the cell ran with ``--metrics`` and again without (options
    that only add rows set no group apart), the later rows of each unit win (as the pivot shows
    the last run of a cell). ``tasks`` (name -> Task) says which options only add rows. A value no
    run can produce is refused, naming its cell (:func:`ctxbench.tasks.base.check_records`).
    """

    records = list(records)
    check_records(records, tasks)
    names = {task} if isinstance(task, str) else (set(task) if task else None)
    groups: dict[tuple, dict[tuple[str, str, str], dict[tuple, dict]]] = {}  # key -> (label, side, factor) -> rows
    failed: set[tuple] = set()
    for r in records:
        if names is not None and r.get("task") not in names:
            continue
        length = _norm(r.get("length", ""))
        # the pivot's setting (ctxbench.results.identity.SETTING): the identity columns that must agree for
        # two methods' cells to hold the same units; the method's own columns are what is compared
        setting, side = paired_setting(r, tasks)
        key = (r.get("model", ""), r.get("task", ""), r.get("variant", ""), setting, int(float(length)))
        label = r.get("label") or r.get("method", "")
        factor = _norm(r.get("factor", "")) if uses_factor(r.get("method", "")) else ""
        cell = (label, side, factor)
        if r.get("status", "ok") != "ok":
            failed.add((key, cell))
            continue
        groups.setdefault(key, {}).setdefault(cell, {})[unit_key(r)] = r
    out = {}
    for key, cells in groups.items():
        kept = {cell: list(rows.values()) for cell, rows in cells.items() if (key, cell) not in failed}
        if kept:
            out[key] = _sides_as_labels(kept)
    return out


def _sides_as_labels(cells: dict[tuple[str, str, str], list[dict]]) -> dict[tuple[str, str], list[dict]]:
    """(label, side, factor) -> rows as (label, factor) -> rows: where a group's cells differ in an
    option compared side by side (:func:`ctxbench.results.identity.paired_setting`: the prompt mode),
    each label carries its text (``none (chat)``), in its rows too (the messages name it), and the
    rows' data digest, which holds that option, is not compared (they pair by seed and trial);
    elsewhere labels are as written."""
    if len({side for _, side, _ in cells}) < 2:
        return {(label, factor): rows for (label, _, factor), rows in cells.items()}
    shown = {cell: f"{cell[0]} ({cell[1]})" if cell[1] else cell[0] for cell in cells}
    return {(shown[cell], cell[2]): [{**r, "label": shown[cell], "data_digest": ""} for r in rows] for cell, rows in cells.items()}


def _group_sort(key: tuple) -> tuple:
    return key[0], key[1], key[2], key[3], key[4]


def _factor_sort(f: str) -> float:
    return _num(f) or 0.0


def _where(key: tuple, factor: str) -> str:
    model, task, variant, _setting, length = key
    return f"{task}{' ' + variant if variant else ''} {model} length {length}" + (f" factor {factor}" if factor else "")


def _pair(key, factor, base_rows, new_rows, reps, seed, level) -> Paired:
    try:
        return paired_rows(base_rows, new_rows, reps=reps, seed=seed, level=level)
    except UserError as exc:
        raise UserError(f"{_where(key, factor)}: {exc.what}", exc.fix) from None


def compare_labels(
    records: Iterable[dict],
    baseline_label: str,
    *,
    task: Sequence[str] | str | None = None,
    tasks: dict | None = None,
    reps: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> list[CellComparison]:
    """Every other label against ``baseline_label``, cell by cell, with Holm-adjusted p-values.

    Cells are grouped by (model, task, variant, setting, length) -- retrieval trials of all
    depths of a length pooled -- and paired by factor: a label's cell at factor ``f`` meets the
    baseline's cell at ``f``; a method that ignores the factor (empty factor) meets every
    factor's cells of the other side, as the pivot shows it beside every factor, and two
    factor-free methods meet once. Groups where the baseline has no cell are skipped; tasks
    with nothing to pair (no per-document nll or per-trial rows) too. ``p_holm`` adjusts over all
    comparisons returned. Raises :class:`UserError` when the baseline label is in no group, or
    when two cells to be paired did not see the same units (naming the cell).
    """
    groups = _cells(records, task, tasks)
    labels = {label for cells in groups.values() for label, _ in cells}
    if baseline_label not in labels:
        guess = closest(baseline_label, labels)
        raise UserError(f"baseline '{baseline_label}' is not a method label of these results",
                        (f"did you mean '{guess}'? " if guess else "") + f"labels: {', '.join(sorted(labels))}")  # fmt: skip
    found = []  # (key, factor, label, base_factor, new_factor, Paired)
    for key in sorted(groups, key=_group_sort):
        cells = groups[key]
        if kind_of(r for rows in cells.values() for r in rows) is None:
            continue
        base_cells = {f: rows for (label, f), rows in cells.items() if label == baseline_label}
        if not base_cells:
            continue
        for (label, f_new), new_rows in sorted(cells.items(), key=lambda kv: (kv[0][0], _factor_sort(kv[0][1]))):
            if label == baseline_label:
                continue
            if f_new:
                targets = [f_new] if f_new in base_cells else ([""] if "" in base_cells else [])
            else:
                targets = sorted(base_cells, key=_factor_sort)
            for f_base in targets:
                factor = f_new or f_base
                paired = _pair(key, factor, base_cells[f_base], new_rows, reps, seed, level)
                found.append((key, factor, label, f_base, f_new, paired))
    adjusted = holm([p.p_value for *_, p in found])
    return [
        CellComparison(model=key[0], task=key[1], variant=key[2], setting=key[3], factor=factor, length=key[4], baseline=baseline_label,
                       label=label, base_factor=f_base, new_factor=f_new, paired=paired, p_holm=adj)  # fmt: skip
        for (key, factor, label, f_base, f_new, paired), adj in zip(found, adjusted, strict=True)
    ]


# --------------------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Ranking:
    """Methods of one table (model, task, variant, setting, factor) at one length, best first.

    ``values``: each label's headline on the shared units (perplexity, or accuracy as a
    fraction). ``p_holm[i][j]``: the Holm-adjusted p of the paired test of labels ``i`` and ``j``
    (all pairs of the table form the family; NaN on the diagonal), ``p_raw[i][j]`` the test's own
    p before that adjustment; ``separated[i][j]`` is
    ``p_holm[i][j] < alpha``; ``delta[i][j]`` the paired difference j minus i (NLL nats per token
    or score). ``letters``: a compact letter display -- labels sharing a letter are not
    separated. ``units``: paired units behind each test (``n`` of kind ``unit``).
    """

    model: str
    task: str
    variant: str
    setting: tuple[tuple[str, str], ...]
    factor: str
    length: int
    metric: str  # "ppl" or "accuracy"
    higher_is_better: bool
    alpha: float
    labels: tuple[str, ...]
    values: tuple[float, ...]
    letters: tuple[str, ...]
    separated: tuple[tuple[bool, ...], ...]
    p_holm: tuple[tuple[float, ...], ...]
    delta: tuple[tuple[float, ...], ...]
    n: int
    unit: str
    p_raw: tuple[tuple[float, ...], ...] = ()


def rank(
    records: Iterable[dict],
    length: int,
    *,
    task: Sequence[str] | str | None = None,
    tasks: dict | None = None,
    alpha: float = 0.05,
    reps: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> list[Ranking]:
    """Rank the methods at ``length``: one :class:`Ranking` per table (model, task, variant,
    setting, factor; factor-free methods join every factor's table, as in the pivot).

    Labels are ordered by their headline (perplexity ascending, accuracy descending; ties by
    label). Every pair of labels is tested with :func:`paired_ppl` / :func:`paired_retrieval`, the
    p-values of one table Holm-adjusted together, and a pair is *separated* when its adjusted p
    is below ``alpha``; the letters are Piepho's compact letter display of that matrix.
    """
    from ctxbench.stats import compact_letters  # start-up: loads numpy

    length = int(length)
    groups = {k: v for k, v in _cells(records, task, tasks).items() if k[4] == length}
    out = []
    for key in sorted(groups, key=_group_sort):
        cells = groups[key]
        kind = kind_of(r for rows in cells.values() for r in rows)
        if kind is None:
            continue
        factors = sorted({f for _, f in cells if f}, key=_factor_sort) or [""]
        for factor in factors:
            table = {label: rows for (label, f), rows in cells.items() if f in (factor, "")}
            if len(table) < 2:
                continue
            names = sorted(table)
            k = len(names)
            pairs = {}
            for i in range(k):
                for j in range(i + 1, k):
                    pairs[(i, j)] = _pair(key, factor, table[names[i]], table[names[j]], reps, seed, level)
            some = next(iter(pairs.values()))
            value = {names[0]: some.headline_base}
            for (_i, j), pr in pairs.items():
                value.setdefault(names[j], pr.headline_new)
            higher = kind == "retrieval"
            order = sorted(range(k), key=lambda i: (-value[names[i]] if higher else value[names[i]], names[i]))
            adjusted = dict(zip(pairs, holm([pr.p_value for pr in pairs.values()]), strict=True))
            where = {old: new for new, old in enumerate(order)}
            p = [[math.nan] * k for _ in range(k)]
            raw = [[math.nan] * k for _ in range(k)]
            d = [[0.0] * k for _ in range(k)]
            for (i, j), pr in pairs.items():
                a, b = where[i], where[j]
                p[a][b] = p[b][a] = adjusted[(i, j)]
                raw[a][b] = raw[b][a] = pr.p_value
                d[a][b], d[b][a] = pr.delta, -pr.delta  # row a, column b: b minus a
            sep = [[(not math.isnan(x)) and x < alpha for x in row] for row in p]
            out.append(Ranking(
                model=key[0], task=key[1], variant=key[2], setting=key[3], factor=factor, length=length,
                metric="accuracy" if higher else "ppl", higher_is_better=higher, alpha=alpha,
                labels=tuple(names[i] for i in order), values=tuple(value[names[i]] for i in order),
                letters=tuple(compact_letters(sep)), separated=tuple(map(tuple, sep)), p_holm=tuple(map(tuple, p)),
                delta=tuple(map(tuple, d)), n=some.n, unit=some.unit, p_raw=tuple(map(tuple, raw)),
            ))  # fmt: skip
    return out
