"""``ctxbench tune``: one orchestration, shared by the CLI and the Python API.

Checks everything a user can get wrong before anything loads (the method's space, the target against
the model's trained length read from its config, the objective, the budget, the guard, the export
engine, the output directory), prices the whole search (:mod:`ctxbench.runner.costmodel`), loads the
model once (:class:`ctxbench.runner.grid.ModelConfig`), tokenises the documents once, splits them by
hash into tuning and held-out ones, runs the search (:mod:`ctxbench.tune.search`) with every
evaluation saved as it lands (:mod:`ctxbench.tune.store`), then the held-out verdict
(:mod:`ctxbench.tune.verdict`), and writes the summary, the plot and the winner's settings.

Files in ``--out DIR``: ``trials.csv`` (every evaluation and trial, with provenance; what a resumed
search reads), ``verdict.csv`` (the six paired comparisons), ``summary.json`` (winner, its command,
the verdict), ``trials.png`` (objective by trial, one slice per parameter), ``niah.toml`` (the
suite that checks the winner's niah accuracy at ``T`` against the defaults').
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ctxbench.errors import UserError, unknown
from ctxbench.methods import exportable, resolve
from ctxbench.methods.export import engine_name, export, export_settings
from ctxbench.methods.frequencies import numpy_namespace
from ctxbench.methods.grid import parse_spec
from ctxbench.methods.params import format_value
from ctxbench.methods.setting import check_applicable, check_derived, frequencies
from ctxbench.model.files import load_geometry
from ctxbench.model.size import model_size
from ctxbench.outfiles import replace_atomically, write_error
from ctxbench.parsing import len_label
from ctxbench.runner.costmodel import factors_for_plan, item_work, rate_for_plan
from ctxbench.tasks.base import CostItem
from ctxbench.tasks.corpus import Tokenized, is_local_dataset, load_corpus
from ctxbench.textsafe import csv_escape
from ctxbench.tune.objective import DEFAULT_OBJECTIVE, ModelObjective, Value, objective_kind, parse_objective
from ctxbench.tune.search import Budget, Search, Trial, has_optuna
from ctxbench.tune.space import FACTOR, Space, space_for, split_instances
from ctxbench.tune.store import OutLock, TrialsFile, check_out
from ctxbench.tune.verdict import Verdict, decide
from ctxbench.version import __version__

DEFAULT_GUARD = 0.05  # nats/token at L/2 over none: docs/tune.md says why
DEFAULT_DOCS = 4
MOST_MINUTES = 7 * 24 * 60


@dataclass(frozen=True)
class TuneSettings:
    """Everything ``ctxbench tune`` takes, parsed (``trials`` and ``minutes``: the budget; either or both)."""

    method: str
    target: int
    out: str
    objective: str = DEFAULT_OBJECTIVE
    trials: int | None = None
    minutes: float | None = None
    guard: float = DEFAULT_GUARD
    docs: int = DEFAULT_DOCS
    dataset: str | None = None
    split: str = "test"
    text_column: str = "text"
    seed: int = 0
    sampler: str = "auto"  # auto (tpe when optuna is installed) | halving | tpe
    export: str | None = None
    only: tuple[str, ...] = ()
    alpha: float = 0.05
    resume: bool = True
    chunk: int = 1024


@dataclass
class TuneOutcome:
    space: Space
    trials: list[Trial] = field(default_factory=list)
    winner: Trial | None = None  # (set once the search ran, as are the defaults and the verdict)
    defaults: Trial | None = None
    verdict: Verdict | None = None
    files: list = field(default_factory=list)
    evaluations: int = 0
    taken: int = 0
    seconds: float = 0.0  # the search and its verdict (what --minutes bounds)
    loading: float = 0.0  # loading the model and tokenising the documents, before
    export_text: str = ""
    niah_command: str = ""


def parse_budget(trials, minutes) -> tuple[int | None, float | None]:
    """``--budget N`` (trials, >= 1) and ``--minutes M`` (> 0); at least one."""
    if trials is None and minutes is None:
        raise UserError("give the search a budget", "pass --budget N (trials) or --minutes M")
    if trials is not None and (isinstance(trials, bool) or int(trials) != trials or trials < 1):
        raise UserError(f"--budget {trials} must be a whole number of trials >= 1", "e.g. --budget 12")
    if minutes is not None and not (0 < minutes <= MOST_MINUTES and math.isfinite(minutes)):
        raise UserError(f"--minutes {minutes:g} must be > 0 (and at most a week)", "e.g. --minutes 25")
    return (int(trials) if trials is not None else None), minutes


def _check_exportable(space: Space, engine: str, settings: TuneSettings, config) -> None:
    """Refuse, before the search, a searched parameter ``--export ENGINE`` cannot express at an end of
    its range (llama.cpp ignores yarn's attention factor): the winner could hold it, and the export
    would fail after the whole search."""
    searched = [d for d in space.dims if d.name != FACTOR and not d.part_of]
    for d in searched:
        for end in d.ends():
            try:
                export_settings(space.method, space.base_factor, engine, model=config.model, params={d.name: end},
                                trust_remote_code=config.trust_remote_code)  # fmt: skip
            except UserError as exc:
                rest = [o.name for o in space.dims if not o.part_of and o.name != d.name]
                raise UserError(f"--export {settings.export}: tune searches {space.method}'s {d.name}, {format_value(end)} at one end, "
                                f"and {exc.what}", (f"search only {','.join(rest)} (--params {','.join(rest)}), or " if rest else "")
                                + "--export json") from None  # fmt: skip


def check(settings: TuneSettings, config) -> Space:
    """Every check that needs no weights: the space (from the model's config: its trained length), the
    options, the output directory. Returns the space."""
    parse_objective(settings.objective)
    parse_budget(settings.trials, settings.minutes)
    if not (settings.guard >= 0 and math.isfinite(settings.guard)):
        raise UserError(f"--guard {settings.guard} must be a number >= 0 (nats per token at L/2 over none)",
                        f"e.g. --guard {DEFAULT_GUARD:g}")  # fmt: skip
    if settings.sampler not in ("auto", "halving", "tpe"):
        raise unknown("--sampler", settings.sampler, ("auto", "halving", "tpe"))
    if settings.sampler == "tpe":
        if not has_optuna():
            raise UserError("--sampler tpe needs optuna", "pip install 'ctxbench[tune]', or use --sampler halving")
    engine = engine_name(settings.export) if settings.export is not None else None
    _check_enough_documents(settings)  # a local dataset read once: its column, and enough long documents
    if settings.docs < 2:
        raise UserError(f"--docs {settings.docs} must be >= 2 (one to tune on, one held out)", "e.g. --docs 4")
    spec, inline = parse_spec(settings.method)
    if inline:  # a report's label or tune's own winner line: a setting, not a method to search
        raise UserError(f"--method '{settings.method}' is one setting of {spec}; tune searches {spec}'s parameters itself",
                        f"pass --method {spec} (and --params {','.join(inline)} to search only those), or run the setting with a task command")  # fmt: skip
    name = resolve(settings.method).name  # an unknown method: did-you-mean, before the config is read
    if engine not in (None, "json") and name not in exportable(engine):
        # checked before the search, not after it: the winner is always a setting of this method
        raise UserError(f"--export {settings.export}: {engine} cannot express method '{name}'",
                        f"{engine} supports: {', '.join(exportable(engine))} (or --export json)")  # fmt: skip
    geom = load_geometry(config.model, config.trust_remote_code)  # the config alone: no weights
    space = space_for(settings.method, geom.trained_len, settings.target, list(settings.only) or None)

    defaults = space.setting(space.defaults())
    try:  # the published defaults are the first contender: a method whose defaults come from the config needs them there
        if geom.has_rope:  # frequencies runs check_applicable first
            frequencies(defaults, geom, space.defaults().factor, settings.target, xp=numpy_namespace())
        else:
            check_applicable(defaults, geom)
    except UserError as exc:
        raise UserError(f"{space.method}'s published defaults cannot run on {config.model}: {exc.what}",
                        "tune it on a model whose config carries them (LongRoPE: a Phi-3 model), or tune another method") from None
    check_derived(defaults, geom, space.defaults().factor, [settings.target])
    if engine not in (None, "json"):
        _check_exportable(space, engine, settings, config)
    check_out(settings.out, {"method": space.method, "objective": settings.objective, "target": space.target,
                             "trained_len": space.trained, "seed": settings.seed}, settings.resume)  # fmt: skip
    config.check()  # the model's files and the backend, still without loading
    return space


def _check_enough_documents(settings: TuneSettings) -> None:
    """What :func:`_documents` refuses after the load, refused before the plan where the text alone
    proves it: a document of ``T`` tokens holds at least ``T`` bytes (no tokenizer gives a token
    less than a byte), so a local dataset or the built-in corpus with fewer than two documents of
    ``T`` bytes cannot give the two the search needs. A hub dataset is only read after the load.
    The one read of a local dataset before the load, so a missing file or column fails here too."""
    if not is_local_dataset(settings.dataset):
        return
    corpus = load_corpus(settings.dataset, settings.split, settings.text_column)
    enough = sum(1 for text in corpus.texts if len(text.encode("utf-8", "surrogatepass")) >= settings.target)
    if enough < 2:
        raise UserError(f"'{corpus.name}' has {enough} document(s) of at least {len_label(settings.target)} bytes, so at most "
                        f"{enough} of {len_label(settings.target)} tokens; tuning needs two (one to tune on, one held out)",
                        "use a dataset with longer documents (--dataset), or a shorter --target")  # fmt: skip


@dataclass(frozen=True)
class Price:
    forwards_t: int
    forwards_half: int
    seconds: float
    per_trial: float
    fixed: float
    basis: str


def price(space: Space, settings: TuneSettings, trials: int, docs: int, config) -> Price:
    """The whole search's cost before it starts: ``none`` at L/2 on the tuning documents, every trial
    on every tuning instance at T (no pruning assumed: the most it can take), the three contenders
    on the held-out ones; each instance a forward of T and the objective's forwards of L/2
    (:attr:`ctxbench.tune.objective.Kind.half_forwards`). Priced as every plan is
    (:func:`ctxbench.runner.costmodel.item_work` at the plan's throughput,
    :func:`~ctxbench.runner.costmodel.rate_for_plan`): the searched method's attention at its path's
    measured cost factor (:func:`~ctxbench.runner.costmodel.factors_for_plan`), ``none``'s as plain."""
    kind = objective_kind(settings.objective)
    held = max(1, round(0.5 * docs))
    tune = docs - held
    size = model_size(config.model, config.trust_remote_code)
    rate, basis, _ = rate_for_plan(config.device, config.dtype, config.model)
    path = space.setting(space.defaults()).attention_path
    factors = factors_for_plan(config.device, config.dtype, config.model, [path]) if rate and path else {}
    if rate and path:
        basis += (f"; {path} attention at {factors[path]:.2f}x a plain forward's (measured on this machine)" if path in factors
                  else f"; {path} attention priced as plain (its cost factor is not measured yet)")  # fmt: skip
    t, half = space.target, space.trained // 2

    def secs(n: int, path: str = "") -> float:  # one forward of n tokens on ``path``
        return rate.seconds(item_work(CostItem(cells=1, forwards=(n,), path=path), size, factors)) if rate else math.nan

    one_t = secs(t, path) + kind.half_forwards * secs(half, path)  # one instance of the searched method
    one_plain = secs(t) + kind.half_forwards * secs(half)  # of the unscaled contender
    per_instance = kind.per_document
    per_trial = tune * per_instance * one_t
    # none at L/2 (the guard's reference), then the three contenders, the unscaled one on the plain path
    fixed = tune * secs(half) + 3 * held * per_instance * one_t - held * per_instance * (one_t - one_plain)
    return Price(trials * tune * per_instance + 3 * held * per_instance, tune, fixed + trials * per_trial, per_trial, fixed,
                 basis)  # fmt: skip


def trials_for(settings: TuneSettings, space: Space, config) -> int:
    """Trials the budget allows: ``--budget``, else as many as ``--minutes`` prices (at least 2)."""
    if settings.trials is not None:
        return settings.trials
    p = price(space, settings, 1, settings.docs, config)
    if not math.isfinite(p.per_trial) or p.per_trial <= 0:
        return 50
    assert settings.minutes is not None  # (no --budget: parse_budget asked for --minutes)
    return max(2, int((settings.minutes * 60 - p.fixed) // p.per_trial))


def tune(settings: TuneSettings, config, console=None) -> TuneOutcome:
    """Run ``ctxbench tune``; ``config`` a :class:`ctxbench.runner.grid.ModelConfig` or a loaded model."""
    from ctxbench.runner.grid import ModelConfig  # start-up: loads filelock

    loaded = None if isinstance(config, ModelConfig) else config
    if loaded is None:
        space = check(settings, config)
    else:
        parse_budget(settings.trials, settings.minutes)
        space = space_for(settings.method, loaded.geometry.trained_len, settings.target, list(settings.only) or None)
    out = Path(settings.out).expanduser()
    trials = settings.trials if settings.trials is not None else (trials_for(settings, space, config) if loaded is None else 50)
    if console is not None and loaded is None:
        show_plan(console, space, settings, trials, config)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(out, exc) from None
    with OutLock(out):  # one search at a time in a folder
        start = time.monotonic()
        lm = config.load(console) if loaded is None else loaded
        try:
            return _tune(lm, space, settings, trials, out, console, start)
        finally:
            if loaded is None:
                lm.close()  # what this search started (an engine), shut down with it


def _documents(lm, settings: TuneSettings, target: int) -> tuple[dict, str]:
    """``({name: ids}, data digest)``: the first ``--docs`` documents of at least ``target`` tokens,
    tokenised once (the token cache of :mod:`ctxbench.tasks.corpus`)."""
    corpus = load_corpus(settings.dataset, settings.split, settings.text_column)
    tokens = Tokenized(corpus, lm.tokenizer)
    chosen = tokens.select([target], settings.docs)[target]
    docs = {corpus.names[i]: tokens[i] for i in chosen}
    if len(docs) < 2:
        raise UserError(f"'{corpus.name}' has {len(docs)} document(s) of {len_label(target)} tokens or more; tuning needs two "
                        "(one to tune on, one held out)", "use a dataset with longer documents (--dataset), or a shorter --target")  # fmt: skip
    digest = hashlib.sha256((corpus.digest + "|" + "|".join(docs)).encode()).hexdigest()[:16]
    return docs, "sha256:" + digest


def _provenance(lm, settings: TuneSettings, space: Space, data_digest: str, sampler: str) -> dict:
    try:
        import torch  # start-up: torch only where it runs
        import transformers  # start-up: transformers only where it runs

        tv, xv = str(torch.__version__), transformers.__version__
    except ImportError:  # a fake model in tests without them
        tv, xv = "", ""
    from ctxbench.runner.grid import new_run_id  # start-up: loads filelock

    return {"run_id": new_run_id(), "model": lm.name, "model_digest": lm.digest, "data_digest": data_digest,
            "backend": lm.identity(), "device": str(lm.device), "dtype": str(lm.dtype),
            "method": space.method, "trained_len": space.trained, "target": space.target, "objective": settings.objective,
            "guard": settings.guard, "seed": settings.seed, "sampler": sampler, "ctxbench_version": __version__,
            "torch_version": tv, "transformers_version": xv}  # fmt: skip


def _tune(lm, space: Space, settings: TuneSettings, trials: int, out: Path, console, start: float) -> TuneOutcome:
    docs, data_digest = _documents(lm, settings, space.target)
    loading, start = __import__("time").monotonic() - start, __import__("time").monotonic()  # --minutes counts from here
    objective = ModelObjective(lm, docs, space.target, settings.objective, settings.chunk, settings.seed)
    data_digest = objective.kind.data_digest(data_digest)  # with needles, the passkey prompt's template too
    sampler = settings.sampler if settings.sampler != "auto" else ("tpe" if has_optuna() else "halving")
    store = TrialsFile(out / "trials.csv", _provenance(lm, settings, space, data_digest, sampler), settings.resume)
    tune_docs, held_docs = split_instances(list(docs), settings.seed)
    tuning = [i for i in objective.instances if objective.documents[i] in tune_docs]
    held = [i for i in objective.instances if objective.documents[i] in held_docs]
    if console is not None:
        console.print(f"[dim]{len(docs)} documents of >= {len_label(space.target)} tokens: tuning on {', '.join(tune_docs)}; "
                      f"held out: {', '.join(held_docs)} (split by hash, seed {settings.seed})[/]", highlight=False)  # fmt: skip
    none = resolve("none")
    outcome = TuneOutcome(space)

    def evaluated(split, trial, candidate, label, factor, params, value):
        store.evaluation(split, trial, candidate, label, factor, params, value)

    # none's NLL at L/2 on the tuning documents: the guard's reference
    cached = store.cached("tune")
    guard_ref = {}
    first = [i for i in tuning if ("none@L/2", i) not in cached]
    for i in tuning:
        if ("none@L/2", i) in cached:
            guard_ref[i] = cached[("none@L/2", i)]
    for value in objective.values(none, 1.0, first, guard_only=True) if first else ():
        guard_ref[value.instance] = value
        evaluated("tune", "none", "none@L/2", "none", 1.0, "{}", value)
    seconds = None if settings.minutes is None else settings.minutes * 60 - (__import__("time").monotonic() - start)
    progress = _Progress(console, trials)

    def record(t, value):
        evaluated("tune", t.number, t.candidate.key, t.label, t.candidate.factor, json.dumps(dict(t.candidate.params)), value)

    def finish(t):
        store.add([{"split": "tune", "kind": "trial", "trial": t.number, "candidate": t.candidate.key, "label": t.label,
                    "factor": t.candidate.factor, "method_params": json.dumps(dict(t.candidate.params)),
                    "instance": "|".join(v.instance for v in t.values), "value": t.objective if t.values else "",
                    "guard_value": t.guard_value if t.values and t.values[0].guard else "",
                    "tokens": sum(w for v in t.values for _, w in v.units), "seconds": round(sum(v.seconds for v in t.values), 3),
                    "status": t.status, "reason": t.reason}])  # fmt: skip

    search = Search(space, objective, tuning, Budget(trials, seconds), guard=settings.guard, guard_reference=guard_ref,
                    seed=settings.seed, sampler=sampler, cached=cached, record=record, finish=finish,
                    progress=progress.update, reserve=3 * len(held))  # fmt: skip
    with progress:
        outcome.trials = search.run()
    outcome.evaluations, outcome.taken = search.computed, search.taken
    best = search.best()
    defaults = outcome.trials[0]
    winner = best or defaults
    outcome.winner, outcome.defaults = winner, defaults

    # the verdict, on held-out instances only
    cached = store.cached("heldout")
    contenders = {"winner": winner, "defaults": defaults}
    held_values: dict[str, list[Value]] = {}
    for role, cand, setting, factor, label in (
        ("winner", winner.candidate, space.setting(winner.candidate), winner.candidate.factor, winner.label),
        ("defaults", defaults.candidate, space.setting(defaults.candidate), defaults.candidate.factor, defaults.label),
        ("unscaled", None, none, 1.0, none.label),
    ):
        key = cand.key if cand is not None else "none"
        if role == "defaults" and winner is defaults:
            held_values[role] = held_values["winner"]
            continue
        values = [cached[(key, i)] for i in held if (key, i) in cached]
        todo = [i for i in held if (key, i) not in cached]
        params = json.dumps(dict(cand.params)) if cand is not None else "{}"
        if console is not None and todo:
            console.print(f"[dim]held out: {label} on {len(todo)} instance(s) ...[/]", highlight=False)
        for value in objective.values(setting, factor, todo) if todo else ():
            values.append(value)
            evaluated("heldout", role, key, label, factor, params, value)
        held_values[role] = sorted(values, key=lambda v: held.index(v.instance))
    del contenders
    outcome.verdict = decide(held_values["winner"], held_values["defaults"], held_values["unscaled"], same=winner is defaults,
                             guard=settings.guard, alpha=settings.alpha, seed=settings.seed, target_name=len_label(space.target))  # fmt: skip
    outcome.seconds, outcome.loading = __import__("time").monotonic() - start, loading
    _write_outputs(outcome, out, settings, lm)
    return outcome


class _Progress:
    """Trials done and the best value so far, on a rich progress bar (nothing without a console)."""

    def __init__(self, console, total: int) -> None:
        self.console, self.total, self.bar, self.task = console, total, None, None

    def __enter__(self):
        if self.console is not None:
            from rich.progress import (  # start-up: rich only where it runs
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(TextColumn("tune"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                                TimeElapsedColumn(), console=self.console, transient=False)  # fmt: skip
            self.bar.__enter__()
            self.task = self.bar.add_task("defaults first", total=self.total)
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, search) -> None:
        if self.bar is None:
            return
        best = search.best()
        done = sum(1 for t in search.trials if t.status != "running")
        text = f"best {best.objective:.4f} ({best.label})" if best else "defaults first"
        self.bar.update(self.task, completed=min(done, self.total), description=text)


def _write_outputs(outcome: TuneOutcome, out: Path, settings: TuneSettings, lm) -> None:

    space, verdict, winner = outcome.space, outcome.verdict, outcome.winner
    assert verdict is not None and winner is not None and outcome.defaults is not None  # (the search ran)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["new", "base", "where", "delta", "lo", "hi", "p", "p_adjusted", "n"], lineterminator="\n")
    w.writeheader()
    for c in verdict.comparisons:
        w.writerow({k: csv_escape(v) if isinstance(v, str) else v for k, v in asdict(c).items()})
    replace_atomically(out / "verdict.csv", buf.getvalue().encode())
    summary = {
        "command": command_of(settings, lm.name, str(lm.dtype)),
        "method": space.method, "trained_len": space.trained, "target": space.target, "objective": settings.objective,
        "guard": settings.guard, "winner": {"label": winner.label, "factor": winner.candidate.factor,
                                            "params": dict(winner.candidate.params), "objective": winner.objective,
                                            "command": space.command(winner.candidate)},
        "defaults": {"label": outcome.defaults.label, "objective": outcome.defaults.objective},
        "verdict": verdict.text, "deploy": verdict.deploy, "held_out": list(verdict.held_out),
        "trials": len(outcome.trials), "statuses": {s: sum(1 for t in outcome.trials if t.status == s)
                                                   for s in sorted({t.status for t in outcome.trials})},
        "evaluations_computed": outcome.evaluations, "evaluations_resumed": outcome.taken, "seconds": round(outcome.seconds, 1),
        "loading_seconds": round(outcome.loading, 1),
    }  # fmt: skip
    replace_atomically(out / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    outcome.files += [out / "trials.csv", out / "verdict.csv", out / "summary.json"]
    outcome.niah_command = niah_suite(outcome, out, lm)
    if (out / "niah.toml").is_file():
        outcome.files.append(out / "niah.toml")
    try:
        from ctxbench.tune.plot import plot_trials  # optional: matplotlib, inside try

        outcome.files.append(plot_trials(outcome.trials, space, out / "trials.png"))
    except ImportError:  # matplotlib is part of the install; a stripped environment still gets the CSV
        pass
    if settings.export:
        model = lm.name
        outcome.export_text = export(space.method, winner.candidate.factor, settings.export, model=model,
                                     params=dict(winner.candidate.params))  # fmt: skip


def command_of(settings: TuneSettings, model: str, dtype: str) -> str:
    """The ``ctxbench tune`` command line that reproduces this search (what summary.json records):
    the model, its dtype and the seed always, every other option where it is not the default."""
    parts = [f"ctxbench tune --method {settings.method} --target {len_label(settings.target)} --model {shlex.quote(model)} "
             f"--dtype {dtype} --seed {settings.seed}"]
    if settings.sampler != "auto":
        parts.append(f"--sampler {settings.sampler}")
    if settings.split != "test":
        parts.append(f"--split {shlex.quote(settings.split)}")
    if settings.text_column != "text":
        parts.append(f"--text-column {shlex.quote(settings.text_column)}")
    if settings.objective != DEFAULT_OBJECTIVE:
        parts.append(f"--objective {settings.objective}")
    if settings.trials is not None:
        parts.append(f"--budget {settings.trials}")
    if settings.minutes is not None:
        parts.append(f"--minutes {settings.minutes:g}")
    if settings.guard != DEFAULT_GUARD:
        parts.append(f"--guard {settings.guard:g}")
    parts.append(f"--docs {settings.docs}")
    if settings.dataset:
        parts.append(f"--dataset {shlex.quote(settings.dataset)}")
    if settings.only:
        parts.append(f"--params {','.join(settings.only)}")
    if settings.export:
        parts.append(f"--export {settings.export}")
    return " ".join(parts + [f"--out {shlex.quote(settings.out)}"])


NIAH_HEADER = "# ctxbench tune: the winner against the defaults in niah"


def niah_suite(outcome: TuneOutcome, out: Path, lm) -> str:
    """Write ``niah.toml``: the winner against the defaults in niah at T (RULER protocol), and return
    the command that runs it and ranks them. When the winner is the defaults' own setting there is
    nothing to compare (greedy answers of one setting are one run): no suite and no command (a
    ``niah.toml`` an earlier search of this folder wrote is removed, as it names another winner)."""
    space, winner, defaults = outcome.space, outcome.winner, outcome.defaults
    assert winner is not None and defaults is not None  # (the search ran)
    if winner.candidate.key == defaults.candidate.key:
        old = out / "niah.toml"
        if old.is_file() and old.read_text(errors="replace").startswith(NIAH_HEADER):
            old.unlink()
        return ""
    factors = sorted({winner.candidate.factor, defaults.candidate.factor})

    def entry(t, label):
        params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in t.candidate.params)
        return f'[[methods]]\nname = "{space.method}"\nlabel = "{label}"\n' + (f"params = {{ {params} }}\n" if params else "")

    text = (f"{NIAH_HEADER} at {len_label(space.target)} (RULER protocol)\n"
            f'description = "tuned {space.method} vs its defaults, niah at {len_label(space.target)}"\n'
            f'model = "{lm.name}"\nseed = 0\n\n' + entry(winner, "tuned") + "\n" + entry(defaults, "defaults") + "\n"
            f'[niah]\nfactors = [{", ".join(f"{f:g}" for f in factors)}]\nlengths = ["{len_label(space.target)}"]\n'
            "protocol = \"ruler\"\ntrials = 40\n")  # fmt: skip
    replace_atomically(out / "niah.toml", text.encode())
    csv_path = out / "niah.csv"
    return (f"ctxbench sweep {out / 'niah.toml'} --out {csv_path} && "
            f"ctxbench rank {csv_path} --len {len_label(space.target)} --task niah")


def show_plan(console, space: Space, settings: TuneSettings, trials: int, config) -> None:
    """The whole search priced before it starts."""
    from rich.table import Table  # start-up: rich only where it runs

    p = price(space, settings, trials, settings.docs, config)
    table = Table(title=f"tune {space.method} for {len_label(space.target)} on {config.model} (L = {len_label(space.trained)}; "
                        f"rough cost: {p.basis})")  # fmt: skip
    for col in ("dimension", "range", "from"):
        table.add_column(col)
    for d in space.dims:
        table.add_row(d.name, d.text(), d.why)
    console.print(table)
    minutes = f"{p.seconds / 60:,.0f} min" if math.isfinite(p.seconds) else "unknown (throughput not measured yet)"
    console.print(f"plan: {trials} trial(s), published defaults first; at most {p.forwards_t} forwards at "
                  f"{len_label(space.target)} and {p.forwards_half} at {len_label(space.trained // 2)} (no pruning assumed): ~{minutes}"
                  + (f"; --minutes {settings.minutes:g} stops it sooner" if settings.minutes else ""), highlight=False)  # fmt: skip
