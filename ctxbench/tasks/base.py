"""The task protocol: what a task module provides and what it gets from ctxbench in return.

A task is one module (or package) that exposes ``TASK = Task(...)`` and is registered as an entry
point in the group ``ctxbench.tasks`` (the built-in ones too, see ``pyproject.toml``). It owns:

- its settings: a frozen dataclass whose first fields are ``methods``, ``factors`` and ``lengths``,
  plus the task's own :class:`Option` list. One function, :func:`ctxbench.runner.settings.build_settings`,
  builds and validates it from CLI options, a suite table and API keywords alike;
- ``prepare(lm, settings) -> Context`` (a :class:`Context`: dataset name, data digest, notes, and
  whatever the task keeps), ``cells(settings, ctx) -> [Cell]``, ``groups(cells, settings) ->
  [[Cell]]`` (cells computed together to share work) and ``run_group(lm, ctx, group, settings)``
  yielding ``(cell, [Measurement])`` as each cell finishes;
- its headline ``metric`` and whether higher is better (for report, compare and effective length);
- ``cost(settings, trained_len) -> [CostItem]`` for plans and dry runs (no model needed);
- optionally ``tables(frame, trained_len)`` and ``plots(frame, directory)`` for people, and
  ``settle(lm, settings) -> settings`` for defaults that depend on the loaded model.

In return every registered task gets a ``ctxbench NAME`` command, a ``[NAME]`` suite section,
resumable CSV rows with full provenance, torchrun sharding, ``report`` and ``compare``.

Nothing here imports torch: ``ctxbench --help`` loads every task's spec to build its command.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Option:
    """One task option: a settings field, a ``--flag`` and a suite key at once.

    ``parse`` turns a raw value (a CLI string, or a TOML/Python value) into the field's value and
    raises :class:`ctxbench.errors.UserError` for bad input; ``None`` means "not given" and keeps
    the dataclass default. ``flag`` overrides the CLI flag (default ``--name`` with ``-`` for ``_``);
    ``is_flag`` makes a boolean ``--name/--no-name`` switch.

    ``identity``: the option's value is part of every cell's identity (the cell key that resume,
    ``compare``, ``report`` and the plots match on), so runs that differ in it never stand in
    for each other. Leave it ``True`` for anything that can change a number; set it ``False``
    only when the value is already a cell column (depths -> ``depth``, variants -> ``variant``,
    stride -> ``stride``), when resume handles it another way (``trials``: a cell holding fewer
    trials runs again), when the task's ``data_digest`` covers it (ppl hashes the documents it
    picked and the BOS choice), or when it provably cannot change a number.

    ``omit_default``: an identity option that enters the ``options`` JSON only when its value
    differs from the settings' default, so an option added after files were written (``--metrics``)
    leaves the identity of every default run as it was; a row without it reads as the default.

    ``adds_rows``: the option only adds rows of further metrics (``--metrics``), and the
    headline's numbers of a cell are the same with it or without it. It stays in the cell key
    (resume: a run that asks for the metric must compute it), but tables, paired comparisons and
    effective lengths no longer set its values apart: a cell run with it and again without it
    reads as one cell there, the latest run's row of each unit winning.

    ``repeatable``: the flag may be given several times (``--metrics kl --metrics longppl``, as
    ``--param`` and lm-eval's list options are), and ``parse`` receives the list of every value
    given, so no value is dropped for the last one (click keeps only the last of a repeated flag
    that is not declared repeatable).

    ``aliases``: older spellings of the flag (``--depth``), accepted but hidden from ``--help``,
    with a deprecation note on stderr: a renamed option keeps its old spelling for a release.
    """

    name: str
    help: str
    parse: Callable[[Any], Any] | None = None
    flag: str | None = None
    is_flag: bool = False
    metavar: str | None = None
    identity: bool = True
    aliases: tuple[str, ...] = ()
    alias_parse: Callable[[Any], Any] | None = None  # how an alias reads its value, where that differs
    omit_default: bool = False  # identity only when not at its default (absent from ``options`` otherwise)
    adds_rows: bool = False  # only adds metrics' rows: tables and paired comparisons do not set it apart
    repeatable: bool = False  # the flag may be given more than once; ``parse`` gets the list of every value given

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Cell:
    """The unit of work that is resumed: one task, method, factor, length (and stride, depth or
    variant). ``factor`` is ``None`` for methods that do not use it: they run once per length."""

    task: str
    method: Any  # ctxbench.methods.MethodSetting
    factor: float | None
    length: int
    stride: int | None = None
    depth: float | None = None
    variant: str = ""

    def label(self) -> str:
        parts = [self.task, self.method.label, f"x{self.factor:g}" if self.factor is not None else "any factor", f"{self.length}"]
        if self.variant:
            parts.insert(1, self.variant)
        if self.depth is not None:
            parts.append(f"depth {self.depth:g}")
        return " ".join(parts)


@dataclass(frozen=True)
class Measurement:
    """One value of a cell; the runner turns it into a :class:`ctxbench.results.store.Row`."""

    metric: str
    value: float | str
    doc: str = ""
    trial: int | str = ""
    tokens: int | str = ""
    seconds: float | str = ""
    status: str = "ok"
    answer: str = ""
    mode: str = ""
    extra: dict = field(default_factory=dict)
    pos: tuple[int, int | None] | None = None  # [start, end) target positions a by-position value covers


@dataclass
class Context:
    """What ``prepare`` returns: where the data came from, notes for people, and task state."""

    dataset: str
    data_digest: str
    notes: list[str] = field(default_factory=list)
    state: Any = None
    seed: int = 0  # the run's seed, set by the runner: every random choice derives from it
    # variant -> (dataset, data_digest) where the variants of one run read different data (qa_1
    # from SQuAD, qa_2 from HotpotQA): each variant's rows name only their own data, so a run of
    # one variant and a run of both resume and compare as the same cells
    variant_data: dict[str, tuple[str, str]] = field(default_factory=dict)
    # cell -> {trial: Measurement} the results file holds for a cell that now asks for more trials
    # (set by the runner): those trials are reused, only the missing ones run
    kept: dict = field(default_factory=dict)

    def data_of(self, variant: str) -> tuple[str, str]:
        """(dataset, data_digest) of a cell of ``variant``."""
        return self.variant_data.get(variant, (self.dataset, self.data_digest))


@dataclass(frozen=True)
class CostItem:
    """A rough cost of one group of cells, for plans: the forwards it makes (their token counts,
    and for each how many tokens are already in the KV cache when it starts) and how many
    decoding steps of one token follow.

    ``counts``: how many times each forward runs (missing: once). A task states a forward that
    every trial or document repeats once with its count, so a plan costs O(cells), never
    O(trials): a plan of ``--trials 10000`` is no bigger than one of ``--trials 4``."""

    cells: int
    forwards: tuple[int, ...]  # prompt/forward lengths in tokens
    decode_steps: int = 0
    what: str = ""
    cached: tuple[int, ...] = ()  # tokens already cached before each forward (missing: none)
    counts: tuple[int, ...] = ()  # times each forward runs (missing: once)

    def runs(self) -> list[tuple[int, int, int]]:
        """``(tokens, cached, times)`` of each forward as stated (``times`` from ``counts``)."""
        n = len(self.forwards)
        cached = tuple(self.cached) + (0,) * (n - len(self.cached))
        counts = tuple(self.counts) + (1,) * (n - len(self.counts))
        return list(zip(self.forwards, cached[:n], counts[:n], strict=True))

    @property
    def forward_count(self) -> int:
        """The forwards a run makes (each stated forward times its count)."""
        return sum(k for _, _, k in self.runs())

    @property
    def tokens(self) -> int:
        return sum(n * k for n, _, k in self.runs()) + self.decode_steps


@dataclass(frozen=True)
class Task:
    """A registered task (see the module docstring)."""

    name: str
    help: str
    settings: type
    options: tuple[Option, ...]
    prepare: Callable
    cells: Callable
    groups: Callable
    run_group: Callable
    cost: Callable
    metric: str  # the headline metric: its aggregate rows (doc and trial "" or "all") are what tables show
    higher_is_better: bool
    default_lengths: Callable[[int], list[int]] = lambda trained_len: [trained_len // 2, trained_len, 2 * trained_len]
    tables: Callable | None = None
    plots: Callable | None = None
    validate: Callable | None = None  # settings -> None; raises UserError (called before any model loads)
    fraction: bool = False  # the headline is a fraction in [0, 1] (shown as a percent, changes in points)
    # record -> {option: value} for rows written before options were part of the cell key (no
    # ``options`` column): what those runs used. Default: every identity option at its default.
    legacy_options: Callable | None = None
    # (lm, settings) -> settings: options left to the model ("auto", such as ``chat`` under RULER's
    # protocol) given the value the loaded model implies, before ``prepare``; rows, cell keys and
    # resume see the settled value only, so an explicit and an implied choice are the same cell.
    settle: Callable | None = None
    # settings -> the numbered trials each cell asks for (0: the task has none). A cell the results
    # file holds with fewer runs only its missing trials on resume (seeded by index, so the old ones match).
    trials: Callable | None = None
    # settings -> cheaper settings (smaller chunks) to retry a group that ran out of memory cell by cell.
    shrink: Callable | None = None

    def settled(self, lm, settings):
        """``settings`` with every model-dependent default decided (see ``settle``)."""
        return self.settle(lm, settings) if self.settle is not None else settings

    def trials_asked(self, settings) -> int:
        """The numbered trials each cell of ``settings`` asks for; 0 when the task has none."""
        return self.trials(settings) if self.trials is not None else 0

    def shrunk(self, settings):
        """``settings`` to retry with after an out-of-memory error (unchanged when the task has no knob)."""
        return self.shrink(settings) if self.shrink is not None else settings

    def option_names(self) -> list[str]:
        return [o.name for o in self.options]

    def field_names(self) -> set[str]:
        return {f.name for f in dataclasses.fields(self.settings)}

    def identity(self, settings) -> dict:
        """The values of the options that are part of a cell's identity (JSON-ready, by name); an
        ``omit_default`` option only when it is not at its default."""
        defaults = self._defaults()
        return {o.name: _plain(getattr(settings, o.name)) for o in self.options
                if o.identity and not (o.omit_default and getattr(settings, o.name) == defaults.get(o.name))}  # fmt: skip

    def default_identity(self) -> dict:
        """:meth:`identity` of the settings' defaults (what a row without an ``options`` column used)."""
        defaults = self._defaults()
        return {o.name: _plain(defaults.get(o.name)) for o in self.options if o.identity and not o.omit_default}

    def _defaults(self) -> dict:
        return {f.name: f.default for f in dataclasses.fields(self.settings) if f.default is not dataclasses.MISSING}


def _plain(value):
    """A settings value as JSON holds it (tuples as lists)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# --- what a task's headline metric means (also for files whose task is not installed) ---


class Headline(NamedTuple):
    metric: str
    higher_is_better: bool
    fraction: bool  # a fraction in [0, 1]: shown as a percent, changes in points


# Files whose task is not installed here (a plug-in's rows): the built-ins' declarations.
HEADLINE_FALLBACK = {"ppl": Headline("ppl", False, False)}
RETRIEVAL = Headline("accuracy", True, True)


def headline_of(task_name: str, tasks: dict | None) -> Headline:
    """What a task's headline metric is and means, also for files whose task is not installed."""
    if tasks and task_name in tasks:
        t = tasks[task_name]
        return Headline(t.metric, t.higher_is_better, t.fraction)
    return HEADLINE_FALLBACK.get(task_name, RETRIEVAL)


def extra_of(record: dict) -> dict:
    """A row's ``extra`` JSON object ({} when a hand edit left it unreadable or not an object)."""
    try:
        value = json.loads(record.get("extra") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
