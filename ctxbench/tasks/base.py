"""The task protocol: what a task module provides and what it gets from ctxbench in return.

A task is one module (or package) that exposes ``TASK = Task(...)`` and is registered as an entry
point in the group ``ctxbench.tasks`` (the built-in ones too, see ``pyproject.toml``). It owns:

- its settings: a frozen dataclass whose first fields are ``methods``, ``factors`` and ``lengths``,
  plus the task's own `Option` list. One function, `ctxbench.runner.settings.build_settings`,
  builds and validates it from CLI options, a suite table and API keywords alike;
- ``prepare(lm, settings) -> Context`` (a `Context`: dataset name, data digest, notes, and
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
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ctxbench.errors import UserError
from ctxbench.parsing import short


@dataclass(frozen=True)
class Option:
    """One task option: a settings field, a ``--flag`` and a suite key at once.

    ``parse`` turns a raw value (a CLI string, or a TOML/Python value) into the field's value and
    raises `ctxbench.errors.UserError` for bad input; ``None`` means "not given" and keeps
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

    ``split``: the option's value is a tuple, and a command given several values runs each as a run
    of its own into one grid (``--prompt-mode chat,completion``: one run per mode, `Task.runs`).

    ``label``: the option's values are compared side by side, as methods are: where the cells of a
    table differ only in it (the same seed, trials and every other option), ``rank`` and the paired
    comparisons read them as one table whose labels carry its text (``none (chat)`` beside ``none
    (completion)``), paired trial by trial. A prompt mode is one: it changes the prompt a trial is
    scored on, not its data (`ctxbench.results.identity.paired_setting`).

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
    split: bool = False  # a tuple of several values runs as one run per value, into one grid (`Task.runs`)
    label: Callable[[Any], str] | None = None  # value -> its text: the option compares side by side, as labels (below)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Reference:
    """One reference mode of a task: the upstream code one value of one of its options holds it
    to, for the docs' table (generated from these, so it cannot drift) and for people.

    ``option``/``value``: the task option and the value that selects the mode (``option`` ""
    when the task has only this mode); ``source``: the upstream files; ``version``: the commit
    or release checked; ``same``: what is the same (and held by a token-exact test); ``differs``:
    what still differs, and why; ``how``: how a user gets the reference's behaviour."""

    option: str
    value: str
    source: str
    version: str
    same: str
    differs: str
    how: str
    default: bool = False


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
    """One value of a cell; the runner turns it into a `ctxbench.results.store.Row`."""

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
    # the attention path its method runs (MethodSetting.attention_path; "": the model's own), whose
    # measured cost factor prices its forwards' attention (ctxbench.runner.costmodel)
    path: str = ""

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
    # (lm, ctx, settings, cell, trial) -> the token ids of that trial's prompt, exactly as ``run_group``
    # builds them (``ctxbench show-prompt``; None: the task does not rebuild a trial's prompt on its own).
    prompt: Callable | None = None
    # the reference modes it declares (`Reference`): the docs' "same as the reference" table is generated from them
    references: tuple = ()
    # settings -> {variant: items of its data} for ``--trials all`` (a task over a dataset: every item runs)
    items: Callable | None = None
    # metric -> the values it can take (`Domain`); every reader refuses a row outside them
    # (`check_records`). ``X_lo``/``X_hi`` rows take ``X``'s domain and must hold ``X``.
    domains: dict = field(default_factory=dict)

    def settled(self, lm: Any, settings: Any) -> Any:
        """``settings`` with every model-dependent default decided (see ``settle``)."""
        return self.settle(lm, settings) if self.settle is not None else settings

    def runs(self, settings) -> list:
        """The settings of each run one command makes: an option declared ``split`` and given
        several values runs each as its own (``--prompt-mode chat,completion``: two runs, one grid)."""
        out = [settings]
        for o in self.options:
            values = getattr(settings, o.name, None) if o.split else None
            if values and len(values) > 1:
                out = [dataclasses.replace(s, **{o.name: (v,)}) for s in out for v in values]
        return out

    def label_options(self) -> dict:
        """name -> text of value of the options compared side by side (``label``)."""
        return {o.name: o.label for o in self.options if o.label is not None}

    def trials_asked(self, settings, cell=None) -> int:
        """The numbered trials each cell of ``settings`` asks for (``cell``: that cell's, which under
        ``--trials all`` is its variant's item count); 0 when the task has none."""
        if getattr(settings, "trials", None) == "all" and self.items is not None:
            counts = self.items(settings)
            return counts.get(cell.variant, 0) if cell is not None else max(counts.values(), default=0)
        return self.trials(settings) if self.trials is not None else 0

    def shrunk(self, settings: Any) -> Any:
        """``settings`` to retry with after an out-of-memory error (unchanged when the task has no knob)."""
        return self.shrink(settings) if self.shrink is not None else settings

    def option_names(self) -> list[str]:
        return [o.name for o in self.options]

    def identity(self, settings) -> dict:
        """The values of the options that are part of a cell's identity (JSON-ready, by name); an
        ``omit_default`` option only when it is not at its default."""
        defaults = self._defaults()
        return {o.name: _plain(getattr(settings, o.name)) for o in self.options
                if o.identity and not (o.omit_default and getattr(settings, o.name) == defaults.get(o.name))}  # fmt: skip

    def default_identity(self) -> dict:
        """`identity` of the settings' defaults (what a row without an ``options`` column used)."""
        defaults = self._defaults()
        return {o.name: _plain(defaults.get(o.name)) for o in self.options if o.identity and not o.omit_default}

    def _defaults(self) -> dict:
        return {f.name: f.default for f in dataclasses.fields(self.settings) if f.default is not dataclasses.MISSING}


def reference_table(task: Task) -> str:
    """The markdown table of ``task``'s reference modes (`Reference`), as the docs print it (a cog
    block per task page, and a test that fails when a page's copy is stale)."""
    flags = {o.name: o.cli_flag for o in task.options}
    rows = ["| mode | reference | version checked | the same | what differs | to get the reference's behaviour |",
            "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in task.references:
        mode = f"`{flags.get(r.option, r.option)} {r.value}`" if r.option else "the one mode"
        mode += " (default)" if r.default and r.option else ""
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in (mode, r.source, r.version, r.same, r.differs, r.how)) + " |")
    return "\n".join(rows)


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


# --- the values each metric can take (also for files whose task is not installed) ---


@dataclass(frozen=True)
class Domain:
    """The values a metric can take in any run, whatever the model or method: a perplexity is
    ``exp`` of a mean NLL >= 0, so never below 1; an accuracy is a mean of outcomes in [0, 1]; a
    passkey trial is right or wrong. A value outside is no measurement (an edited or damaged
    file, another tool's), and a reader that took it would judge it -- a perplexity of 0.5
    ranks best, an accuracy of 1.7 shows as 170% -- so every reader refuses it, naming the cell
    (`check_records`). Only finite numbers are judged: NaN, inf and text are the readers'
    own case (``compare`` fails such a cell, tables show it as missing)."""

    lo: float = -math.inf
    hi: float = math.inf
    whole: bool = False  # a count
    values: tuple[float, ...] = ()  # the only values it takes (a right-or-wrong outcome: 0 and 1)
    meaning: str = ""

    def __str__(self) -> str:
        if self.values:
            return "{" + ", ".join(f"{v:g}" for v in self.values) + "}"
        if self.whole:
            return f"a whole number >= {self.lo:g}" if self.hi == math.inf else f"a whole number in [{self.lo:g}, {self.hi:g}]"
        return f"[{self.lo:g}, " + ("inf)" if self.hi == math.inf else f"{self.hi:g}]")

    def holds(self, value: float) -> bool:
        """Whether the finite ``value`` is in the domain; its bounds allow float rounding (a mean
        of ones summed in another order may be 1 + 1 ulp), its values and counts do not."""
        if self.values:
            return value in self.values
        if self.lo <= value <= self.hi:
            return not self.whole or value.is_integer()
        if math.isinf(value):
            return False  # no slack past an infinity
        slack = 1e-9 * max(1.0, abs(value))
        return self.lo - slack <= value <= self.hi + slack and (not self.whole or value.is_integer())


PERPLEXITY = Domain(1.0, meaning="a perplexity, exp of a mean NLL >= 0")
NLL = Domain(0.0, meaning="a negative log-likelihood in nats")
DIVERGENCE = Domain(0.0, meaning="a KL divergence")
FRACTION = Domain(0.0, 1.0, meaning="a fraction")
OUTCOME = Domain(values=(0.0, 1.0), meaning="one trial, right (1) or wrong (0)")
SCORE = Domain(0.0, 1.0, meaning="one trial's score, the fraction of its expected answers found")
COUNT = Domain(0.0, whole=True, meaning="a count")
AMOUNT = Domain(0.0, meaning="a time, rate or size")

# Whatever the task: the columns every row has, and the numbers of a row's ``extra`` that readers
# use (the pivot pools a length's depths by ``trials`` and ``correct``, a proxy by ``answer_nll``).
COLUMN_DOMAINS = {"tokens": COUNT, "seconds": AMOUNT}
EXTRA_DOMAINS = {"trials": COUNT, "docs": COUNT, "correct": Domain(0.0, meaning="trials right, a sum of scores"),
                 "answer_nll": NLL, "answer_tokens": COUNT}  # fmt: skip
_EXTRA_KEYS = re.compile("|".join(f'"{key}"' for key in EXTRA_DOMAINS))

# Files whose task is not installed here (a plug-in's rows): the built-ins' declarations by metric
# name; ``score`` the loosest of them (RULER's fraction of expected answers found).
DOMAIN_FALLBACK = {
    "ppl": PERPLEXITY, "nll": NLL, "nll_pos": NLL, "nll_beyond_L": NLL, "longppl": PERPLEXITY, "kl": DIVERGENCE,
    "key_tokens": COUNT, "docs": COUNT, "answer_nll": NLL, "accuracy": FRACTION, "correct": OUTCOME, "score": SCORE,
}  # fmt: skip

# The columns a value row and its interval rows (``ppl``, ``ppl_lo``, ``ppl_hi``) share: the cell's
# identity (`ctxbench.results.identity.IDENTITY`) and the place in it but the metric
# (``WITHIN``); a test holds them in step.
PLACE = ("model_digest", "data_digest", "task", "method", "label", "method_params", "factor", "length", "stride", "depth",
         "variant", "seed", "dtype", "options", "backend", "trial", "doc", "pos_start")  # fmt: skip


def domains_of(task_name: str, tasks: dict | None) -> dict:
    """metric -> `Domain` of a task: what it declares (a ``fraction`` headline is in [0, 1]
    even when not declared), or `DOMAIN_FALLBACK` for a task that is not installed."""
    if tasks and task_name in tasks:
        t = tasks[task_name]
        return {t.metric: FRACTION, **t.domains} if t.fraction else dict(t.domains)
    return DOMAIN_FALLBACK


def _finite(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _bound_of(metric: str) -> tuple[str, str]:
    """``("ppl", "lo")`` for ``ppl_lo``; ``(metric, "")`` for anything else."""
    if metric.endswith(("_lo", "_hi")):
        return metric[:-3], metric[-2:]
    return metric, ""


def domain_reason(record: dict, tasks: dict | None, domains: dict | None = None) -> str:
    """Why a row holds a number outside its domain (``ppl 0.5 is outside [1, inf) (a perplexity,
    ...)``), or ``""``: its metric's value (an interval bound takes its metric's domain), its
    columns in `COLUMN_DOMAINS` (``tokens``, ``seconds``), and the numbers of its ``extra`` in `EXTRA_DOMAINS`.
    ``domains``: the task's, when the caller has them at hand. Cheap (a few microseconds a row:
    readers call it on every row of a 100k-row file)."""
    domains = domains_of(record.get("task", ""), tasks) if domains is None else domains
    metric = record.get("metric", "")
    domain = domains.get(metric)
    if domain is None and metric[-3:] in ("_lo", "_hi"):
        domain = domains.get(metric[:-3])
    why = _outside(metric, record.get("value"), domain) if domain is not None else ""
    for column, d in COLUMN_DOMAINS.items():
        why = why or _outside(column, record.get(column), d)
    text = record.get("extra") or ""
    if not why and (named := _EXTRA_KEYS.search(text)):  # parse only the rows that may hold one
        try:
            extra = json.loads(text)
        except ValueError:
            return f"extra is not valid JSON ({_short(text)}), yet it names {named.group(0)}"
        if not isinstance(extra, dict):
            return f"extra is a JSON {type(extra).__name__}, not an object"
        for key, d in EXTRA_DOMAINS.items():
            if key not in extra or why:
                continue
            value = extra[key]
            if value is not None and (isinstance(value, (bool, str, list, dict))):
                why = f"extra.{key} {_short(json.dumps(value))} is not a number"
            elif isinstance(value, float) and not math.isfinite(value):
                why = f"extra.{key} {value} is not a finite number"
            else:
                why = _outside(f"extra.{key}", value, d) if value is not None else ""
    return why


def _short(text: str, most: int = 40) -> str:
    return short(text, most)


def _ok_rows(records: Iterable[dict], tasks: dict | None) -> Iterator[tuple[dict, dict]]:
    """Each ``ok`` row with its task's domains (looked up once a task): rows that are not ``ok`` are
    read by no reader, so no check judges them."""
    by_task: dict[str, dict] = {}
    for r in records:
        if r.get("status", "ok") != "ok":
            continue
        task = r.get("task", "")
        domains = by_task.get(task)
        if domains is None:
            domains = by_task[task] = domains_of(task, tasks)
        yield r, domains


def check_numbers(records: Iterable[dict], tasks: dict | None, where: str = "") -> None:
    """Refuse an ``ok`` row of a metric with a domain whose value is no number (empty, text, a
    decimal comma), naming the file and the cell: what ``report`` and ``rank`` show as tables, where
    such a value would read as a gap (``—``) in a table that looks whole. ``compare`` judges it
    itself (the cell fails the gate, named), so this is the display readers' check."""
    for r, domains in _ok_rows(records, tasks):
        metric = r.get("metric", "")
        if metric in domains or (metric[-3:] in ("_lo", "_hi") and metric[:-3] in domains):
            why = _not_a_number(metric, r.get("value"))
            if why:
                raise UserError(f"{where}{cell_text(r)}: {why}", DOMAIN_FIX)


def _not_a_number(name: str, raw) -> str:
    """Why a value is no number (empty, text, a decimal comma), or ``""``."""
    if raw is None or raw == "":
        return f"{name} is empty (an ok row always holds its number)"
    try:
        float(raw)
    except (TypeError, ValueError):
        comma = " (a decimal comma? ctxbench writes 0.5)" if re.fullmatch(r"-?\d+,\d+", str(raw).strip()) else ""
        return f"{name} {_short(repr(raw))} is not a number{comma}"
    return ""


def _outside(name: str, raw, d: Domain) -> str:
    """``name raw is outside d (meaning)`` when ``raw`` is a number (not NaN) outside ``d``, else ``""``."""
    if raw is None or raw == "":
        return ""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return ""  # text has its own path in each reader
    if math.isnan(value) or d.holds(value):  # NaN too; an infinity is judged (-inf is no perplexity)
        return ""
    return f"{name} {raw} is outside {d}" + (f" ({d.meaning})" if d.meaning else "")


def cell_text(record: dict) -> str:
    """The cell and place of a row for people: ``ppl yarn x2 at length 8192 doc all``."""
    get = record.get
    factor = f" x{get('factor')}" if get("factor", "") != "" else ""
    parts = [f"{get('task', '?')}" + (f" {get('variant')}" if get("variant", "") not in ("", "default") else ""),
             f"{get('label') or get('method', '?')}{factor} at length {get('length', '?')}"]  # fmt: skip
    parts += [f"{c} {get(c)}" for c in ("depth", "trial", "doc", "pos_start") if get(c, "") != ""]
    return " ".join(parts)


DOMAIN_FIX = ("no run of ctxbench writes such a value: restore the row from the file the run wrote, or delete every row "
              "of that cell and run it again (a resumed run measures only the cells the file lacks)")  # fmt: skip


def check_records(records: Iterable[dict], tasks: dict | None, where: str = "") -> None:
    """Refuse rows that no run can produce, as `ctxbench.errors.UserError` naming the
    first such cell and the fix: a number outside its `Domain` (`domain_reason`), or
    an aggregate outside its own interval (``ppl`` not within ``ppl_lo``..``ppl_hi``, ``lo > hi``).
    Every reader calls it where records become cells (the pivot, ``compare``, the paired tests
    behind ``rank`` and ``report --baseline``, the plots), so none judges such a value. Rows that
    are not ``ok`` are not read by any reader and not checked. ``where``: a prefix for the
    message (the file). One pass; a row's ``extra`` is parsed only when it may hold a number."""
    intervals: dict[tuple, dict[str, tuple[float, dict]]] = {}
    for r, domains in _ok_rows(records, tasks):
        reason = domain_reason(r, tasks, domains)
        if reason:
            raise UserError(f"{where}{cell_text(r)}: {reason}", DOMAIN_FIX)
        metric, bound = _bound_of(r.get("metric", ""))
        if metric in domains and r.get("trial", "") in ("", "all"):
            value = _finite(r.get("value"))
            if value is not None:  # a later row of the same place replaces an earlier one (a rerun appended)
                intervals.setdefault((tuple(r.get(c, "") for c in PLACE), metric), {})[bound] = (value, r)
    for (_, metric), got in intervals.items():
        if "lo" not in got and "hi" not in got:
            continue
        (lo, _), (hi, _) = got.get("lo", (-math.inf, None)), got.get("hi", (math.inf, None))
        value, row = got.get("", (None, {}))  # the aggregate's value and row ({}: none, never read)
        slack = 1e-9 * max(1.0, abs(lo), abs(hi))
        if lo > hi + slack:
            r = got["lo"][1]
            raise UserError(f"{where}{cell_text(r)}: {metric}_lo {lo:.6g} is above {metric}_hi {hi:.6g}", DOMAIN_FIX)
        if value is not None and not lo - slack <= value <= hi + slack:
            shown = " and ".join(f"{metric}_{b} {v:.6g}" for b, v in (("lo", lo), ("hi", hi)) if b in got)
            raise UserError(f"{where}{cell_text(row)}: {metric} {value:.6g} is outside its own 95% interval ({shown})", DOMAIN_FIX)
