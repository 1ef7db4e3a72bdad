"""The one pivot every report format shows: method label x length, per task, variant, factor and
headline metric, each cell with its 95% interval and sample size — and, where the rows carry a
proxy metric (``--metrics``: ``longppl``, ``kl``, ``answer_nll``), one more such table per proxy,
after the headline's (no effective length, no paired test: those are the headline's).

Headline rows are a task's aggregate rows of its headline metric, as the task declares it
(:class:`ctxbench.tasks.base.Task`: ``metric``, ``higher_is_better``, ``fraction``; ``doc`` and
``trial`` empty or ``all``). Methods that ignore the factor are run once and written with an
empty factor; the pivot shows them beside every factor of the same task (the baseline row of
each table).

Cells are told apart by their whole identity (:data:`ctxbench.results.identity.IDENTITY`): runs of one
task that differ in anything else that changes a number — the data (its name or digest), the
model's weights, a sliding stride, a task option such as ``--chat`` or ``--digits``, the dtype,
the seed — make separate tables, each titled with what sets it apart, rather than one run's
cell silently standing in for another's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ctxbench.errors import UserError, closest
from ctxbench.parsing import len_label
from ctxbench.results.identity import SETTING, WITHIN, paired_setting, setting_of, unit_key
from ctxbench.tasks.base import Headline, check_records, extra_of, headline_of
from ctxbench.tasks.proxy import HIGHER_IS_BETTER as PROXY_HIGHER_IS_BETTER  # light: no torch


@dataclass
class PivotCell:
    value: float
    lo: float | None = None
    hi: float | None = None
    n: int | None = None  # trials (accuracy) or documents (ppl)
    change: float | None = None  # against --baseline: relative for ppl, absolute for accuracy
    # against --baseline, paired on the same units (ctxbench.report.paired): new - base in NLL nats per
    # token (perplexity) or score, its 95% interval, p-value, Holm-adjusted p, units paired
    delta: float | None = None
    delta_lo: float | None = None
    delta_hi: float | None = None
    p_value: float | None = None
    p_holm: float | None = None
    paired_n: int | None = None
    ran_out: int | None = None  # trials whose thinking budget ran out (``--think-budget``: counted apart from wrong); None: no thinking
    source: tuple = field(default=(), repr=False)  # every ok row of the cell (its trials or documents), for resampling


@dataclass
class Pivot:
    model: str
    task: str
    variant: str
    factor: str  # "" only when no row of the table has a factor
    metric: str
    higher_is_better: bool
    lengths: list[int]
    rows: dict[str, dict[int, PivotCell]] = field(default_factory=dict)  # label -> length -> cell
    effective: dict[str, int | None] = field(default_factory=dict)  # label -> effective length
    effective_ci: dict[str, tuple] = field(default_factory=dict)  # label -> its 95% bootstrap interval (lengths)
    trained_len: int | None = None
    fraction: bool = False  # values are fractions: shown as percents
    setting: str = ""  # what sets this table apart from another of the same task (e.g. "chat=true")
    key: tuple = ()  # that setting's identity values (dataset, digests, stride, options, dtype, seed)
    headline: bool = True  # the task's headline metric (False: a proxy metric's table)

    @property
    def title(self) -> str:
        what = self.task + (f" {self.variant}" if self.variant and self.variant != "default" else "")
        what += "" if self.metric == self.task else f" {self.metric}"
        factor = f"factor {self.factor}" if self.factor else "any factor"
        return f"{what} — {self.model}, {factor}" + (f" ({self.setting})" if self.setting else "")


def _num(text, default=None):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def _fmt_factor(text) -> str:
    value = _num(text)
    return "" if value is None else f"{value:g}"


def build(records: list[dict], tasks: dict | None = None, task=None, method=None, factor=None, length=None,
          baseline: str | None = None, check: bool = True) -> list[Pivot]:  # fmt: skip
    """Pivots from result records (dicts of strings), filtered by task names, method labels or
    names, factors and lengths (lists or None). Refuses a value no run can produce
    (:func:`ctxbench.tasks.base.check_records`), naming its cell; ``check=False`` where the
    caller has just checked these records itself (``compare``, naming each file)."""

    if check:
        check_records(records, tasks)
    groups: dict[tuple, list[dict]] = {}
    bounds: dict[tuple, dict[str, float]] = {}
    per_trial: dict[tuple, set] = {}  # trials seen per depth cell: the count when an old row lacks extra.trials
    sources: dict[tuple, list[dict]] = {}  # every ok row of a cell (all its depths)
    # One pass, O(rows): a cell's key is normalised once, from the first row with its raw values
    # (``setting_of`` reads only the raw columns below); the others look it up.
    keys: dict[tuple, tuple] = {}
    heads: dict[str, str] = {}
    for r in records:
        if r.get("status") != "ok":
            continue
        raw = (r["model"], r["task"], r.get("variant", ""), r.get("label") or r["method"], r["factor"], r["length"],
               *(r.get(c, "") for c in SETTING))  # fmt: skip
        key = keys.get(raw)
        if key is None:
            setting = tuple(value for _, value in setting_of(r, tasks))
            key = keys[raw] = (r["model"], r["task"], r.get("variant", ""), setting, r.get("label") or r["method"],
                               _fmt_factor(r["factor"]), int(float(r["length"])))  # fmt: skip
        sources.setdefault(key, []).append(r)
        if r.get("trial", "") not in ("", "all"):
            per_trial.setdefault((*key, r.get("depth", "")), set()).add(r["trial"])
            continue
        if r.get("doc", "") not in ("", "all"):
            continue
        head = heads.get(r["task"])
        if head is None:
            head = heads[r["task"]] = headline_of(r["task"], tasks).metric
        metric, bound = _metric_of(r["metric"], head)
        if metric is None:
            continue
        if bound:
            bounds.setdefault((*key, metric, r.get("depth", "")), {})[bound] = _num(r["value"])
        else:
            groups.setdefault((*key, metric), []).append(r)
    if task:
        groups = {k: v for k, v in groups.items() if k[1] in task}
    if method:
        groups = {k: v for k, v in groups.items() if k[4] in method or v[0]["method"] in method}
    if length:
        groups = {k: v for k, v in groups.items() if k[6] in length}
    tables: dict[tuple, Pivot] = {}
    factors: dict[tuple, set[str]] = {}
    for (model, t, variant, setting, _label, f, _n, _m) in groups:
        if f:
            factors.setdefault((model, t, variant, setting), set()).add(f)
    titles = _setting_titles({k[:4] for k in groups})
    units: dict[tuple, tuple] = {}  # raw place -> unit key, shared by every cell
    for (model, t, variant, setting, label, f, n, metric), rows in groups.items():
        headline = headline_of(t, tasks)
        primary = metric == headline.metric
        if not primary:
            headline = Headline(metric, PROXY_HIGHER_IS_BETTER[metric], False)
        # a factor-free cell (the method ignores the factor) joins every factor's table
        targets = [f] if f else sorted(factors.get((model, t, variant, setting), {""}), key=lambda x: _num(x, 0))
        if factor:
            targets = [x for x in targets if _num(x) in factor]
        latest = {row.get("depth", ""): row for row in rows}  # per depth, the last run of the cell
        if len(latest) == 1:
            r = rows[-1]
            extra = _extra(r)
            b = bounds.get((model, t, variant, setting, label, f, n, metric, r.get("depth", "")), {})
            cell = PivotCell(_num(r["value"], float("nan")), b.get("lo"), b.get("hi"), extra.get("trials") or extra.get("docs"),
                             ran_out=extra.get("ran_out_thinking") if primary else None)  # fmt: skip
        elif not primary:  # a proxy over several depths: the mean of every trial's value, bootstrapped
            cell, extra = _pooled_proxy(metric, sources.get((model, t, variant, setting, label, f, n), [])), _extra(rows[-1])
        else:
            trials = {d: len(per_trial.get((model, t, variant, setting, label, f, n, d), ())) for d in latest}
            cell, extra = _pooled(list(latest.values()), trials)
        cell.source = _latest_units(sources.get((model, t, variant, setting, label, f, n), ()), units)
        for target in targets:
            p = tables.setdefault((model, t, variant, setting, target, not primary, metric),
                                  Pivot(model, t, variant, target, headline.metric, headline.higher_is_better, [], fraction=headline.fraction,
                                        setting=titles[(model, t, variant, setting)], key=setting, headline=primary))  # fmt: skip
            # a copy per table: a factor-free cell's change and paired verdict are against each table's baseline
            p.rows.setdefault(label, {})[n] = replace(cell) if len(targets) > 1 else cell
            p.trained_len = p.trained_len or extra.get("trained_len")
    out = []
    for key in sorted(tables, key=lambda k: (k[0], k[1], k[2], k[3], _num(k[4], 0), k[5], k[6])):
        p = tables[key]
        p.lengths = sorted({n for cells in p.rows.values() for n in cells})
        if baseline and (p.headline or baseline in p.rows):
            _add_changes(p, baseline, list(tables.values()))
        out.append(p)
    return out


def _metric_of(name: str, headline: str) -> tuple[str | None, str]:
    """``(metric, bound)`` of an aggregate row's metric name: the headline's or a proxy's value
    (bound ``""``) or its interval bound (``"lo"``/``"hi"``); ``(None, "")`` for anything else
    (``key_tokens``, a plug-in's side rows)."""
    for metric in (headline, *PROXY_HIGHER_IS_BETTER):
        if name == metric:
            return metric, ""
        if name in (metric + "_lo", metric + "_hi"):
            return metric, name[len(metric) + 1 :]
    return None, ""


def _pooled_proxy(metric: str, sources: list[dict]) -> PivotCell:
    """A per-trial proxy (``answer_nll``) over the depth cells of a length: the mean of every
    trial's value (its row's ``extra``; a trial run twice counts once, its last run) and the 95%
    bootstrap interval of that mean over the trials."""
    from ctxbench.stats import bootstrap_mean  # start-up: loads numpy

    by_trial = {}
    for r in sources:
        value = _num(_extra(r).get(metric)) if r.get("trial", "") not in ("", "all") else None
        if value is not None:
            by_trial[(r.get("depth", ""), r["trial"])] = value
    values = list(by_trial.values())
    if not values:
        return PivotCell(float("nan"))
    lo, hi = bootstrap_mean(values, [1.0] * len(values)) if len(values) >= 2 else (None, None)
    return PivotCell(sum(values) / len(values), lo, hi, len(values))


_PLACE = ("depth", *WITHIN)  # what unit_key reads


def _latest_units(rows, memo: dict | None = None) -> tuple[dict, ...]:
    """The rows of a cell with each unit (depth, trial, document, metric, position) once: its
    latest run's row. A cell run twice in one table -- once with ``--metrics``, once without --
    holds every trial twice, and the paired tests and bootstraps count a trial once. ``memo``:
    raw place -> unit key, shared across cells (each distinct place normalised once)."""

    memo = {} if memo is None else memo
    out = {}
    for r in rows:
        raw = tuple(r.get(c, "") for c in _PLACE)
        key = memo.get(raw)
        if key is None:
            key = memo[raw] = unit_key(r)
        out[key] = r
    return tuple(out.values())


def _setting_titles(tables: set[tuple]) -> dict[tuple, str]:
    """For each (model, task, variant, setting): the columns in which it differs from another
    table of the same model, task and variant, as ``chat=true, dtype bfloat16`` ("" when alone)."""

    siblings: dict[tuple, list[tuple]] = {}
    for key in tables:
        siblings.setdefault(key[:3], []).append(key[3])
    out = {}
    for key in tables:
        others = siblings[key[:3]]
        parts = []
        for i, column in enumerate(SETTING):
            if len({s[i] for s in others}) < 2:
                continue
            value = key[3][i]
            if column == "options":
                parts += _option_diff(value, [s[i] for s in others])
            elif column == "stride":
                parts.append(f"stride {value}" if value else "truncate")
            elif column.endswith("_digest"):
                parts.append(f"{column.split('_')[0]} {value.split(':')[-1][:8]}")
            else:
                parts.append(f"{column} {value}")
        out[key] = ", ".join(parts)
    return out


def _option_diff(options: str, all_options: list[str]) -> list[str]:
    """``key=value`` for each task option whose value is not the same in every table."""
    def parse(text):
        try:
            value = json.loads(text or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    mine, every = parse(options), [parse(o) for o in all_options]
    keys = sorted({k for o in every for k in o})
    return [f"{k}={json.dumps(mine.get(k))}" for k in keys if len({json.dumps(o.get(k)) for o in every}) > 1]


def _pooled(rows: list[dict], counted: dict) -> tuple[PivotCell, dict]:
    """One accuracy over the depth cells of a length: every trial of every depth counts once
    (RULER's score of a length is the mean over its samples at all depths), with the Wilson
    interval of the pooled count (fractional scores counted as :func:`accuracy_rows` does)."""
    from ctxbench.stats import wilson  # start-up: loads numpy

    extras = [_extra(r) for r in rows]
    sizes = [int(e.get("trials") or counted.get(r.get("depth", ""), 0)) for r, e in zip(rows, extras, strict=True)]
    n = sum(sizes)
    if n == 0:
        return PivotCell(float("nan")), extras[-1]
    total = sum(float(e.get("correct", _num(r["value"], 0.0) * k)) for r, e, k in zip(rows, extras, sizes, strict=True))
    lo, hi = wilson(min(n, round(total)), n)
    counts = [e["ran_out_thinking"] for e in extras if "ran_out_thinking" in e]
    return PivotCell(total / n, lo, hi, n, ran_out=sum(counts) if counts else None), {**extras[-1], "trials": n, "depths": len(rows)}


def _extra(record: dict) -> dict:

    return extra_of(record)


def _add_changes(p: Pivot, baseline: str, tables: Sequence[Pivot] = ()) -> None:

    if baseline not in p.rows:
        # the label may be in a table of the same task set apart by a setting (task options such as
        # --chat, dtype, seed; not --metrics): a paired comparison needs both methods' cells in one table
        apart = [t for t in tables if baseline in t.rows and (t.model, t.task, t.variant, t.factor) == (p.model, p.task, p.variant, p.factor)]
        if apart:
            raise UserError(f"--baseline '{baseline}' is not in '{p.title}': it is in '{apart[0].title}', a table of its own",
                            "tables are set apart by task options, dtype and seed, and a change is computed within one table: "
                            "run the baseline with the same options (e.g. the same --chat, --dtype, --seed) or leave out --baseline")  # fmt: skip
        guess = closest(baseline, p.rows)
        raise UserError(f"--baseline '{baseline}' is not a method label of '{p.title}'",
                        (f"did you mean '{guess}'? " if guess else "") + f"labels: {', '.join(p.rows)}")  # fmt: skip
    base = p.rows[baseline]
    for label, cells in p.rows.items():
        for n, cell in cells.items():
            if n in base and label != baseline and not math.isnan(base[n].value):
                if p.fraction:  # points
                    cell.change = cell.value - base[n].value
                else:
                    cell.change = cell.value / base[n].value - 1 if base[n].value else None


def ran_out_note(p: Pivot) -> str:
    """The cells whose trials ran out while thinking (``--think-budget``), each as ``label length
    k/n``: a third outcome beside right and wrong, said under the table; "" when none did (a run
    without thinking: the table as before)."""
    shown = [f"{label} {len_label(n)} {cells[n].ran_out}/{cells[n].n}" for label, cells in p.rows.items() for n in sorted(cells)
             if cells[n].ran_out]  # fmt: skip
    return "ran out while thinking (not counted as wrong answers): " + ", ".join(shown) if shown else ""


def fmt_value(p: Pivot, cell: PivotCell | None, intervals: bool = True) -> str:
    """A cell for people: ``75% [47-92%] n=12`` for accuracy, ``5.726 [5.61-5.85]`` for ppl."""
    if cell is None or math.isnan(cell.value):
        return "—"
    percent = p.fraction
    text = f"{cell.value:.0%}" if percent else f"{cell.value:.4g}"
    if intervals and cell.lo is not None and cell.hi is not None:
        text += f" [{cell.lo:.0%}–{cell.hi:.0%}]" if percent else f" [{cell.lo:.4g}–{cell.hi:.4g}]"
    if percent and cell.n:
        text += f" n={int(cell.n)}"
    if cell.delta is not None:
        text += " " + fmt_paired(p, cell)
    elif cell.change is not None:
        text += f" ({cell.change * 100:+.0f} pts)" if percent else f" ({cell.change:+.1%})"
    return text


def fmt_paired(p: Pivot, cell: PivotCell) -> str:
    """``(Δ +4.7% [+3.7, +6.2], p=0.001, Holm 0.003)``: the paired difference against the baseline,
    as a perplexity ratio for NLL and in points for fractions, with the test's own p-value and
    beside it the Holm-adjusted one (Holm 1979) over every comparison the report shows: the raw p
    is the same in any report of this pair, the adjusted one depends on the family it is in."""
    assert cell.delta is not None and cell.delta_lo is not None and cell.delta_hi is not None  # (set together)
    if p.fraction:
        body = f"Δ {cell.delta * 100:+.0f} pts [{cell.delta_lo * 100:+.0f}, {cell.delta_hi * 100:+.0f}]"
    elif p.metric == "ppl":
        ratio = lambda x: (math.exp(x) - 1) * 100  # noqa: E731  NLL difference -> perplexity ratio
        body = f"Δ {ratio(cell.delta):+.1f}% [{ratio(cell.delta_lo):+.1f}, {ratio(cell.delta_hi):+.1f}]"
    else:
        body = f"Δ {cell.delta:+.3g} [{cell.delta_lo:+.3g}, {cell.delta_hi:+.3g}]"
    return f"({body}, p={cell.p_value:.2g}, Holm {cell.p_holm:.2g})"


def add_paired(ps: list[Pivot], comparisons, tasks: dict | None = None) -> None:
    """Put each paired comparison (:func:`ctxbench.report.paired.compare_labels`) on its pivot cell
    (matched by the paired comparisons' own setting of the cell's rows,
    :func:`ctxbench.results.identity.paired_setting`)."""
    for c in comparisons:
        for p in ps:
            if not p.headline or (p.model, p.task, p.variant) != (c.model, c.task, c.variant) or c.factor not in ("", p.factor):
                continue
            cell = p.rows.get(c.label, {}).get(c.length)
            if cell is not None and cell.source and paired_setting(cell.source[0], tasks)[0] == c.setting:
                cell.delta, cell.delta_lo, cell.delta_hi = c.delta, c.lo, c.hi
                cell.p_value, cell.p_holm, cell.paired_n = c.p, c.p_holm, c.n


def effective_all_pass(p: Pivot, label: str) -> bool:
    """Whether a method's effective length is the longest length it was measured at: every length
    passed, so the effective length is at least that, not a limit found."""
    eff = p.effective.get(label)
    measured = [n for n, c in p.rows.get(label, {}).items() if not math.isnan(c.value)]
    return bool(eff) and bool(measured) and eff == max(measured)


def fmt_effective(p: Pivot, label: str) -> str:
    """``8k [4k–16k]``: a method's effective length and its 95% bootstrap interval; ``≥16k`` where
    every length passed and 16k is the longest measured (as RULER's ``>128K``: a bound, not a limit)."""
    eff = p.effective.get(label)
    text = ("≥" if effective_all_pass(p, label) else "") + len_label(eff) if eff else "—"
    ci = p.effective_ci.get(label)
    if ci is not None and ci != (eff, eff):
        text += f" [{len_label(ci[0]) if ci[0] else '—'}–{len_label(ci[1]) if ci[1] else '—'}]"
    return text
