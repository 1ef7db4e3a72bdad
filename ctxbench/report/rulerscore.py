"""RULER's suite score (Hsieh et al., 2024, arXiv 2404.06654; NVIDIA/RULER's README table) from
the pivot's cells of the RULER tasks: the per-length average over the tasks, the weighted
averages across lengths and the effective length at RULER's fixed threshold.

RULER's 13 tasks (``scripts/synthetic.yaml``) are ctxbench cells ``(task, variant)``:
``niah`` single_1..3, multikey_1..3, multivalue, multiquery; ``vt``, ``cwe``, ``fwe``
(variant ``default``); ``qa`` qa_1 (SQuAD) and qa_2 (HotpotQA).

``ruler_avg``
    Per (model, method label, factor, length) and one *suite setting*: the mean of the accuracy of
    each RULER task measured there, in percent as RULER prints it, with how many of the 13 it
    covers (``n_tasks``: "11/13"). A length's task accuracy is the pivot's cell (every trial of
    every depth pooled, RULER's score of a task at a length). An average over fewer than 13 tasks
    is never RULER's 13-task average: every format shows the coverage beside it.
The suite setting
    What must agree for tasks to be averaged: the model name and weights (``model_digest``),
    ``dtype``, ``seed``, ``stride``, and the task options ``chat`` and ``protocol`` (a row without a
    protocol reads as ``exact`` for niah/vt/cwe/fwe, written before the option existed, and as
    ``ruler`` for qa); any other identity option must agree too. Data digests are per task (each
    task has its own data) and are not compared across tasks; two runs of one task in one setting
    that differ in data (another haystack, another machine's corpus) are not averaged: that task is
    left out of the average and a note says so.
``wAvg (inc)`` / ``wAvg (dec)``
    RULER's weighted averages of a method's per-length averages: over its lengths sorted
    ``n_1 < ... < n_N``, weights ``i`` (inc) or ``N + 1 - i`` (dec), normalised to sum 1 — weights
    growing (shrinking) linearly along RULER's length grid 4k, 8k, ..., 128k. This reproduces the
    README's columns (Llama-3.1-70B: 96.5 95.8 95.4 94.8 88.4 66.6 -> 85.5 and 93.7). On another
    grid a length's weight is its rank among the table's lengths (a method missing one keeps the
    weights of the lengths it has, normalised over them, and a note says so); the coverage of
    RULER's six standard lengths is stated.
Effective length
    RULER's: the longest measured length up to which the average stays at or above 85.6 at every
    measured length (Llama-2-7B's score at 4k; a score of exactly 85.6 passes, as Qwen3-32B's 85.6
    at 128K does in RULER's table; compared within 1e-9 for float rounding). ``None`` when the
    shortest length already fails (RULER prints "<4K"); ``all_pass`` when every length passes
    (RULER prints ">128K"). This is a different rule from the per-task effective length
    (:mod:`ctxbench.report.effective`: 85% of the method's own shortest-length score).
One task set per method
    wAvg and the effective length use, at every length, the average over the tasks the method has
    at *all* its lengths, so each length averages the same tasks (the per-length columns average
    whatever was measured there; a note says where the two differ).
Uncertainty
    A 95% percentile bootstrap (2000 resamples): each task's trials at a length are resampled with
    replacement, independently per task and length (each has prompts of its own), the task means
    recomputed and averaged again; wAvg and the effective length are recomputed from the same
    draws. The resampled trial indices depend only on (task, variant, length, trial count), and
    trials are matched by (depth, trial) in sorted order, so every method sees the same
    resampling of the same prompts (trial seeds are shared across methods, :mod:`ctxbench.report.paired`).
    A length with a task that holds no trial rows (a summary-only cell) has no interval.

Pure functions over :class:`ctxbench.report.pivot.Pivot` objects; numpy is imported inside.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctxbench.parsing import len_label
from ctxbench.report.paired import TRIAL_METRICS
from ctxbench.results.identity import SETTING
from ctxbench.results.identity import field as ident
from ctxbench.textsafe import md_cell, md_line

if TYPE_CHECKING:
    from ctxbench.report.pivot import PivotCell

# RULER's 13 tasks as ctxbench (task, variant) -> RULER's name
TASKS: dict[tuple[str, str], str] = {
    **{("niah", v): f"niah_{v}" for v in ("single_1", "single_2", "single_3", "multikey_1", "multikey_2", "multikey_3",
                                         "multivalue", "multiquery")},  # fmt: skip
    ("vt", "default"): "vt",
    ("cwe", "default"): "cwe",
    ("fwe", "default"): "fwe",
    ("qa", "qa_1"): "qa_1",
    ("qa", "qa_2"): "qa_2",
}
N_TASKS = len(TASKS)  # 13
FAMILIES = frozenset(t for t, _ in TASKS)
THRESHOLD = 85.6  # Llama-2-7B's RULER average at 4k
STANDARD_LENGTHS = (4096, 8192, 16384, 32768, 65536, 131072)
REPS = 2000
LEVEL = 0.95
TOL = 1e-9  # percent points: 85.6 computed as a mean of fractions may land one ulp below
DEFAULT_PROTOCOL = {"qa": "ruler"}  # rows without a protocol: qa was born with RULER's; the others predate the option
# A task's own reference mode (qa's --doc-count): set apart per task like its data, never a suite setting of its own,
# so qa's cells average with the other 11 tasks' (two modes of one task in one setting: left out, as two data would be)
TASK_MODES = frozenset({"doc_count"})


@dataclass
class SuiteCell:
    """One method's ``ruler_avg`` at one length, in percent, with its 95% interval."""

    value: float
    lo: float | None = None
    hi: float | None = None
    tasks: tuple[str, ...] = ()  # RULER names of the tasks averaged

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)


@dataclass
class SuiteRow:
    label: str
    cells: dict[int, SuiteCell] = field(default_factory=dict)
    tasks: tuple[str, ...] = ()  # measured at every length of the method: what wAvg and the effective length average
    lengths: list[int] = field(default_factory=list)  # the lengths wAvg and the effective length use
    wavg_inc: float | None = None
    wavg_inc_lo: float | None = None
    wavg_inc_hi: float | None = None
    wavg_dec: float | None = None
    wavg_dec_lo: float | None = None
    wavg_dec_hi: float | None = None
    effective: int | None = None  # None: the shortest length is already below the threshold
    effective_lo: int | None = None
    effective_hi: int | None = None
    effective_sampled: bool = False  # effective_lo/hi come from the bootstrap (None there: the shortest length fails)
    all_pass: bool = False  # every measured length passes: the effective length is at least the longest

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)


@dataclass
class Suite:
    """One "RULER suite score" table: rows = method labels, columns = lengths."""

    model: str
    factor: str  # "" = any factor
    setting: dict  # protocol, chat, dtype, seed, model_digest, stride, other options
    lengths: list[int]
    rows: dict[str, SuiteRow] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    setting_text: str = ""
    group: tuple = ()
    threshold: float = THRESHOLD

    @property
    def standard_lengths(self) -> int:
        """How many of RULER's six lengths (4k-128k) this table measured."""
        return len(set(self.lengths) & set(STANDARD_LENGTHS))

    @property
    def title(self) -> str:
        factor = f"factor {self.factor}" if self.factor else "any factor"
        return f"RULER suite score — {self.model}, {factor} ({self.setting_text})"


# --------------------------------------------------------------------------- RULER's formulas


def weights(lengths, grid=None) -> tuple[list[float], list[float]]:
    """RULER's (inc, dec) weights of ``lengths`` on a length ``grid`` (default: the lengths
    themselves): a length's rank ``i`` in the sorted grid of ``N`` gives ``i`` (inc) or ``N + 1 - i``
    (dec), normalised over ``lengths``."""
    order = sorted(grid if grid is not None else lengths)
    rank = {n: i + 1 for i, n in enumerate(order)}
    inc = [float(rank[n]) for n in lengths]
    dec = [float(len(order) + 1 - rank[n]) for n in lengths]
    return [w / sum(inc) for w in inc], [w / sum(dec) for w in dec]


def wavg(values: dict[int, float], grid=None) -> tuple[float, float]:
    """RULER's (wAvg inc, wAvg dec) of per-length averages (:func:`weights`)."""
    lengths = sorted(values)
    if not lengths:
        raise ValueError("no lengths")
    inc, dec = weights(lengths, grid)
    return sum(w * values[n] for w, n in zip(inc, lengths, strict=True)), sum(w * values[n] for w, n in zip(dec, lengths, strict=True))


def effective_length(values: dict[int, float], threshold: float = THRESHOLD) -> tuple[int | None, bool]:
    """RULER's effective length of per-length averages (percent): the longest length up to which
    every measured length is at or above ``threshold``; and whether every length passed."""
    best = None
    lengths = sorted(values)
    for n in lengths:
        if not values[n] >= threshold - TOL:
            return best, False
        best = n
    return best, bool(lengths)


# --------------------------------------------------------------------------- from pivots


def _options(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _group(p) -> tuple[tuple, tuple, dict]:
    """(suite group key, the task's own residual identity, the setting as a dict) of a pivot."""

    s = dict(zip(SETTING, p.key, strict=True)) if len(p.key) == len(SETTING) else dict.fromkeys(SETTING, "")
    options = _options(s["options"])
    chat = options.pop("chat", s["dataset"].endswith("-chat"))
    protocol = options.pop("protocol", DEFAULT_PROTOCOL.get(p.task, "exact"))
    modes = tuple(f"{k}={options.pop(k)}" for k in sorted(TASK_MODES & set(options)))
    setting = {"protocol": protocol, "chat": chat, "dtype": s["dtype"], "seed": s["seed"], "model_digest": s["model_digest"],
               "stride": s["stride"], **{f"option {k}": v for k, v in sorted(options.items())}}  # fmt: skip
    key = (p.model, *(json.dumps(v, sort_keys=True) for v in setting.values()), tuple(setting))
    return key, (s["dataset"], s["data_digest"], *modes), setting


def _cell_factor(cell, table_factor: str) -> str:
    """The factor a cell was measured at: "" for a method that ignores it (shown in every factor's table)."""
    if cell.source:
        return table_factor if ident(cell.source[0], "factor") != "" else ""
    return table_factor


def _units(cell) -> list[float]:
    """A cell's per-trial scores, sorted by (depth, trial): the same order for every method."""

    found: dict[tuple, float] = {}
    for r in cell.source:
        if r.get("trial", "") in ("", "all") or r.get("metric") not in TRIAL_METRICS:
            continue
        try:
            value, depth, trial = float(r["value"]), r.get("depth", ""), int(float(r["trial"]))
            depth = -1.0 if depth in ("", None) else float(depth)
        except (TypeError, ValueError):
            return []
        if math.isnan(value):
            return []
        found[(depth, trial)] = value  # a cell given twice (two files): the last run's trial
    return [found[k] for k in sorted(found)]


def _draws(units: list[float], task: tuple[str, str], length: int, reps: int, seed: int):
    """``reps`` bootstrap means of one task's trials at one length; the indices depend only on
    (task, length, trial count, seed), so every method is resampled alike."""
    import numpy as np  # start-up: numpy only where it runs

    values = np.asarray(units, dtype=np.float64)
    tag = zlib.crc32(f"{task[0]}/{task[1]}/{length}/{len(units)}".encode())
    rng = np.random.default_rng([seed, tag])
    idx = rng.integers(0, len(values), size=(reps, len(values)))
    return values[idx].mean(axis=1)


def _interval(draws, level: float) -> tuple[float, float]:
    import numpy as np  # start-up: numpy only where it runs

    tail = (1 - level) / 2
    lo, hi = np.quantile(draws, [tail, 1 - tail])
    return float(lo), float(hi)


def suites(ps, reps: int = REPS, seed: int = 0, level: float = LEVEL) -> list[Suite]:
    """The RULER suite tables of the pivots ``ps`` (those of other tasks are ignored): one per
    model, suite setting and factor, with a row per method label."""

    # group -> label -> cell factor -> length -> (task, variant) -> residual -> cell
    store: dict[tuple, dict[str, dict[str, dict[int, dict[tuple, dict[tuple, PivotCell]]]]]] = {}
    settings: dict[tuple, dict] = {}
    models: dict[tuple, str] = {}
    for p in ps:
        if (p.task, p.variant) not in TASKS or not p.fraction or not p.headline:
            continue
        key, residual, setting = _group(p)
        settings[key], models[key] = setting, p.model
        for label, cells in p.rows.items():
            for n, cell in cells.items():
                if cell.value is None or math.isnan(cell.value):
                    continue
                cf = _cell_factor(cell, p.factor)
                slot = store.setdefault(key, {}).setdefault(label, {}).setdefault(cf, {}).setdefault(n, {})
                slot.setdefault((p.task, p.variant), {})[residual] = cell
    out = []
    for key, labels in store.items():
        factors = sorted({cf for by_factor in labels.values() for cf in by_factor if cf}, key=lambda x: float(x))
        for f in factors or [""]:
            suite = Suite(models[key], f, settings[key], [], group=key)
            table: dict[str, dict[int, dict[tuple, PivotCell]]] = {}
            for label, by_factor in labels.items():
                cells = by_factor.get(f) if f else None
                cells = cells if cells is not None else by_factor.get("")
                if cells is None:
                    continue
                table[label] = {}
                for n, tasks in cells.items():
                    chosen = {}
                    for task, runs in tasks.items():
                        if len(runs) > 1:
                            digests = ", ".join(sorted(r[1].split(":")[-1][:8] or "?" for r in runs))
                            suite.notes.append(f"{label} at {len_label(n)}: {TASKS[task]} left out of the average — "
                                               f"runs with different data ({digests}) in one setting")  # fmt: skip
                            continue
                        chosen[task] = next(iter(runs.values()))
                    if chosen:
                        table[label][n] = chosen
                if not table[label]:
                    del table[label]
            if not table:
                continue
            suite.lengths = sorted({n for cells in table.values() for n in cells})
            said: dict[str, list[str]] = {}  # what is said of which labels, said once
            for label, cells in table.items():
                suite.rows[label] = _row(label, cells, suite.lengths, reps, seed, level, said)
            _notes(suite, said)
            out.append(suite)
    _setting_texts(out)
    return sorted(out, key=lambda s: (s.model, s.setting_text, float(s.factor or 0)))


def _row(label: str, cells: dict[int, dict[tuple, PivotCell]], grid: list[int], reps: int, seed: int, level: float,
         said: dict[str, list[str]]) -> SuiteRow:  # fmt: skip
    import numpy as np  # start-up: numpy only where it runs


    order = list(TASKS)
    row = SuiteRow(label)
    draws: dict[int, dict[tuple, Any]] = {}  # length -> task -> bootstrap means (fractions), where every task has trials
    for n in sorted(cells):
        tasks = sorted(cells[n], key=order.index)
        units = {t: _units(cells[n][t]) for t in tasks}
        value = 100 * sum(cells[n][t].value for t in tasks) / len(tasks)
        cell = SuiteCell(value, tasks=tuple(TASKS[t] for t in tasks))
        if all(units.values()):
            draws[n] = {t: _draws(units[t], t, n, reps, seed) for t in tasks}
            cell.lo, cell.hi = _interval(100 * np.mean([draws[n][t] for t in tasks], axis=0), level)
        row.cells[n] = cell
    common = [t for t in order if all(t in cells[n] for n in cells)]
    row.tasks = tuple(TASKS[t] for t in common)
    if not common:
        said.setdefault("no RULER task is measured at all its lengths: no wAvg or effective length", []).append(label)
        return row
    if any(set(cells[n]) != set(common) for n in cells):
        said.setdefault("not every length measures the same tasks; wAvg and the effective length average those measured at "
                        f"every length ({', '.join(row.tasks)})", []).append(label)  # fmt: skip
    row.lengths = sorted(cells)
    if row.lengths != grid:
        absent = ", ".join(len_label(n) for n in grid if n not in cells)
        said.setdefault(f"not measured at {absent}; wAvg weighs the lengths measured by their rank among the table's",
                        []).append(label)  # fmt: skip
    values = {n: 100 * sum(cells[n][t].value for t in common) / len(common) for n in row.lengths}
    row.wavg_inc, row.wavg_dec = wavg(values, grid)
    row.effective, row.all_pass = effective_length(values)
    if all(n in draws for n in row.lengths):
        sampled = {n: 100 * np.mean([draws[n][t] for t in common], axis=0) for n in row.lengths}
        inc, dec = (np.array(w) for w in weights(row.lengths, grid))
        stacked = np.stack([sampled[n] for n in row.lengths])  # (lengths, reps)
        row.wavg_inc_lo, row.wavg_inc_hi = _interval(inc @ stacked, level)
        row.wavg_dec_lo, row.wavg_dec_hi = _interval(dec @ stacked, level)
        passing = np.logical_and.accumulate(stacked >= THRESHOLD - TOL, axis=0)  # prefix rule, per resample
        reached = passing.sum(axis=0)  # how many leading lengths pass
        found = np.sort(np.array([0, *row.lengths])[reached])  # 0: even the shortest fails
        tail = (1 - level) / 2
        lo, hi = found[int(math.floor(tail * (reps - 1)))], found[int(math.ceil((1 - tail) * (reps - 1)))]
        row.effective_lo, row.effective_hi, row.effective_sampled = int(lo) or None, int(hi) or None, True
    return row


def _notes(suite: Suite, said: dict[str, list[str]]) -> None:

    seen = {t for row in suite.rows.values() for c in row.cells.values() for t in c.tasks}
    missing = [name for name in TASKS.values() if name not in seen]
    if missing:
        suite.notes.insert(0, f"covers {len(seen)} of RULER's {N_TASKS} tasks (missing: {', '.join(missing)}): "
                              f"an average over fewer than {N_TASKS} is not RULER's {N_TASKS}-task average")  # fmt: skip
    k = suite.standard_lengths
    if sorted(suite.lengths) != list(STANDARD_LENGTHS):
        have = ", ".join(len_label(n) for n in suite.lengths)
        suite.notes.append(f"lengths {have}: {k} of RULER's 6 (4k-128k); wAvg's weights are the lengths' ranks in this table "
                           "(RULER's: 4k..128k ranked 1..6)")  # fmt: skip
    if suite.setting.get("protocol") != "ruler":
        suite.notes.append(f"protocol {suite.setting.get('protocol')}: not RULER's prompt accounting and needle placement "
                           "(docs/tasks.md, RULER tasks); not comparable with RULER's published scores")  # fmt: skip
    suite.notes += [f"{', '.join(labels)}: {what}" for what, labels in said.items()]


def _setting_texts(out: list[Suite]) -> None:
    """``protocol exact, chat false`` and whatever else sets a table apart from another of its model."""
    by_model: dict[str, list[Suite]] = {}
    for s in out:
        by_model.setdefault(s.model, []).append(s)
    for same in by_model.values():
        for s in same:
            parts = [f"protocol {s.setting['protocol']}", f"chat {json.dumps(s.setting['chat'])}"]
            for k, v in s.setting.items():
                if k in ("protocol", "chat") or len({json.dumps(o.setting.get(k)) for o in same}) < 2:
                    continue
                shown = v.split(":")[-1][:8] if k == "model_digest" else (json.dumps(v) if k.startswith("option ") else v)
                parts.append(f"{k.replace('_digest', '').replace('option ', '')} {shown}")
            s.setting_text = ", ".join(parts)


# --------------------------------------------------------------------------- for people


def fmt_cell(cell: SuiteCell | None) -> str:
    """``31.5 [25.0–38.2] (11/13)``: ruler_avg in percent, its interval and its task coverage."""
    if cell is None:
        return "—"
    text = f"{cell.value:.1f}"
    if cell.lo is not None and cell.hi is not None:
        text += f" [{cell.lo:.1f}–{cell.hi:.1f}]"
    return text + f" ({cell.n_tasks}/{N_TASKS})"


def fmt_wavg(row: SuiteRow, which: str) -> str:
    value = getattr(row, f"wavg_{which}")
    if value is None:
        return "—"
    text = f"{value:.1f}"
    lo, hi = getattr(row, f"wavg_{which}_lo"), getattr(row, f"wavg_{which}_hi")
    if lo is not None and hi is not None:
        text += f" [{lo:.1f}–{hi:.1f}]"
    return text + f" ({row.n_tasks}/{N_TASKS})"


def fmt_effective(row: SuiteRow) -> str:
    """``8k [4k–16k] (11/13)``; ``<2k`` when the shortest length fails, ``≥16k`` when every one passes."""

    if not row.lengths:
        return "—"

    def one(n, all_pass=False):
        return f"<{len_label(row.lengths[0])}" if not n else ("≥" if all_pass else "") + len_label(n)

    text = one(row.effective, row.all_pass)
    ci = (row.effective_lo, row.effective_hi)
    if row.effective_sampled and ci != (row.effective, row.effective):
        text += f" [{one(ci[0])}–{one(ci[1])}]"
    return text + f" ({row.n_tasks}/{N_TASKS})"


COLUMNS = ("wAvg (inc)", "wAvg (dec)", f"effective length (≥{THRESHOLD})")
EXPLAIN = (f"ruler_avg: mean accuracy (%) of the RULER tasks measured at that length (k/{N_TASKS}: how many of RULER's "
           f"{N_TASKS}); wAvg: RULER's weighted averages across lengths (weights 1..N inc, N..1 dec); effective length: "
           f"RULER's, the longest length up to which ruler_avg stays at or above {THRESHOLD}; [95% bootstrap over trials]")  # fmt: skip


def rich_table(s: Suite):
    from rich.markup import escape  # start-up: rich only where it runs
    from rich.table import Table  # start-up: rich only where it runs


    table = Table(title=escape(s.title), caption=escape("\n".join([EXPLAIN, *s.notes])), caption_justify="left")
    table.add_column("method", style="bold")
    for n in s.lengths:
        table.add_column(len_label(n), justify="right")
    for c in COLUMNS:
        table.add_column(c, justify="right")
    for label, row in s.rows.items():
        table.add_row(label, *(fmt_cell(row.cells.get(n)) for n in s.lengths), fmt_wavg(row, "inc"), fmt_wavg(row, "dec"),
                      fmt_effective(row))  # fmt: skip
    return table


def to_markdown(ss: list[Suite]) -> str:

    parts = []
    for s in ss:
        cols = [len_label(n) for n in s.lengths] + list(COLUMNS)
        lines = [f"#### {md_line(s.title)}", "", "| method | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols)]
        for label, row in s.rows.items():
            cells = [fmt_cell(row.cells.get(n)) for n in s.lengths] + [fmt_wavg(row, "inc"), fmt_wavg(row, "dec"), fmt_effective(row)]
            lines.append(f"| {md_cell(label)} | " + " | ".join(md_cell(c) for c in cells) + " |")
        lines += ["", EXPLAIN + "."] + [f"- {md_line(note)}" for note in s.notes]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def to_dict(s: Suite) -> dict:
    """One suite table as JSON-ready data (percent, full precision)."""
    return dict(
        kind="ruler_suite", title=s.title, model=s.model, factor=s.factor, setting=s.setting, setting_text=s.setting_text,
        threshold=s.threshold, n_tasks_total=N_TASKS, lengths=s.lengths, standard_lengths=s.standard_lengths, notes=s.notes,
        rows=[dict(method=label, cells={str(n): dict(ruler_avg=c.value, lo=c.lo, hi=c.hi, n_tasks=c.n_tasks, tasks=list(c.tasks))
                                        for n, c in row.cells.items()},
                   n_tasks=row.n_tasks, tasks=list(row.tasks), lengths_used=row.lengths,
                   wavg_inc=row.wavg_inc, wavg_inc_interval=_pair(row.wavg_inc_lo, row.wavg_inc_hi),
                   wavg_dec=row.wavg_dec, wavg_dec_interval=_pair(row.wavg_dec_lo, row.wavg_dec_hi),
                   effective_length=row.effective, effective_interval=[row.effective_lo, row.effective_hi] if row.effective_sampled else None,
                   effective_all_pass=row.all_pass)
              for label, row in s.rows.items()],
    )  # fmt: skip


def _pair(lo, hi):
    return None if lo is None and hi is None else [lo, hi]


CSV_FIELDS = ["ruler_setting", "ruler_avg", "ruler_avg_lo", "ruler_avg_hi", "ruler_n_tasks", "ruler_common_tasks", "ruler_lengths",
              "ruler_standard_lengths", "ruler_wavg_inc", "ruler_wavg_inc_lo", "ruler_wavg_inc_hi", "ruler_wavg_dec", "ruler_wavg_dec_lo",
              "ruler_wavg_dec_hi", "ruler_effective_length", "ruler_effective_lo", "ruler_effective_hi", "ruler_effective_all_pass"]  # fmt: skip


def csv_fields(ss: list[Suite], p, label: str, n: int) -> dict:
    """The suite columns of one pivot row (the method's suite score at that length), {} if none."""
    if (p.task, p.variant) not in TASKS:
        return {}
    key = _group(p)[0]
    mine = [s for s in ss if s.group == key and label in s.rows]
    s = next((x for x in mine if x.factor == p.factor), mine[0] if mine else None)
    if s is None:
        return {}
    row = s.rows[label]
    c = row.cells.get(n)
    return dict(
        ruler_setting=s.setting_text, ruler_avg=c and c.value, ruler_avg_lo=c and c.lo, ruler_avg_hi=c and c.hi,
        ruler_n_tasks=c and c.n_tasks, ruler_common_tasks=row.n_tasks, ruler_lengths=len(row.lengths),
        ruler_standard_lengths=s.standard_lengths, ruler_wavg_inc=row.wavg_inc, ruler_wavg_inc_lo=row.wavg_inc_lo,
        ruler_wavg_inc_hi=row.wavg_inc_hi, ruler_wavg_dec=row.wavg_dec, ruler_wavg_dec_lo=row.wavg_dec_lo,
        ruler_wavg_dec_hi=row.wavg_dec_hi, ruler_effective_length=row.effective, ruler_effective_lo=row.effective_lo,
        ruler_effective_hi=row.effective_hi, ruler_effective_all_pass=row.all_pass if row.lengths else None,
    )  # fmt: skip
