"""The one orchestration path: plan, load once, run every job's grid, write rows, summarise.

Data flows one way: cli / api -> runner -> tasks -> rows -> results. :func:`execute` is what the
CLI and the Python API (``ctxbench.run``, ``ctxbench.sweep``) both call; showing progress is an
option of it (a rich console), not a second path. Under ``torchrun`` / ``accelerate launch`` each
rank runs the cell groups whose index is its rank modulo the world size, all ranks share one
``run_id`` and write into the same results file (it is locked per cell).

The runner owns provenance (model and data digests, versions, device, seed, method parameters
after defaults) and resume; tasks only measure.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ctxbench import backends
from ctxbench.defaults import DEFAULT_ATTN, DEFAULT_DEVICE, DEFAULT_DTYPE, DEFAULT_MODEL
from ctxbench.methods import check_applicable, effective_params
from ctxbench.model.files import check_model
from ctxbench.report.display import summary_tables
from ctxbench.results.identity import cell_key
from ctxbench.results.store import ResultsFile, Row, as_strings, check_writable, read_records
from ctxbench.runner import distributed
from ctxbench.runner.adaptive import run_adaptive
from ctxbench.runner.costmodel import measured_factor, measured_rate
from ctxbench.runner.plan import Todo, plan_table, print_plan
from ctxbench.runner.progress import TokenProgress
from ctxbench.runner.settings import (
    check_attn,
    check_backend,
    check_device,
    check_dtype,
    check_grid_size,
    check_loaded,
    check_methods_on_model,
    check_seed,
    check_tensor_parallel,
)
from ctxbench.tasks.base import Cell, Context, Measurement, Task
from ctxbench.version import __version__

if TYPE_CHECKING:
    from rich.console import Console

    from ctxbench.backends.base import Engine
    from ctxbench.methods.params import Params
    from ctxbench.methods.setting import MethodSetting
    from ctxbench.results.identity import Record
    from ctxbench.runner.plan import Plan


@dataclass(frozen=True)
class ModelConfig:
    """How to load the model (CLI: --model --device --dtype --attn --device-map --trust-remote-code
    --backend --tensor-parallel)."""

    model: str = DEFAULT_MODEL
    device: str = DEFAULT_DEVICE
    dtype: str = DEFAULT_DTYPE
    attn: str | None = DEFAULT_ATTN
    trust_remote_code: bool = False
    device_map: str | None = None
    quantization: str | None = None
    backend: str = backends.DEFAULT  # a name of ctxbench.backends.BACKENDS (hf: transformers, the reference)
    tensor_parallel: int = 1  # GPUs one vLLM engine spans (--backend vllm)

    def check(self, jobs: Sequence[Job] = ()) -> None:
        """What can be checked without loading: the attention kernel can run on the device, and
        the model's files are where it says and their headers are whole (a missing path or a damaged
        file fails here, before the plan). The dtype, the device (a GPU asked for is there) and
        tensor parallel (against the backend, then the model's heads) are checked here too: the
        CLI, suites and the API all build a config, so a dry run refuses what the run would."""

        check_dtype(self.dtype)
        check_device(self.device)
        check_tensor_parallel(self.tensor_parallel)
        check_attn(self.attn, self.device)
        check_model(self.model)
        check_backend(jobs, self)  # what the backend cannot run, its tensor parallelism against the model's heads

    def load(self, console: Console | None = None) -> Engine:
        """The loaded model, through its backend; with a rich ``console``, a "loading ..." status meanwhile."""
        if console is None:
            return backends.get(self.backend).load(self)
        with console.status(f"loading {self.model} ..."):
            return backends.get(self.backend).load(self)


@dataclass(frozen=True)
class Job:
    """One task with its settings: a command, or one section of a suite."""

    task: Task
    settings: Any  # the task's settings dataclass (Task.settings)


@dataclass
class Outcome:
    """What a run produced: every record of its grids (new and resumed) and notes for people."""

    records: list[Record]
    run_id: str = ""
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    notes: list[str] = field(default_factory=list)
    trained_len: int | None = None
    keys: set[tuple[str, ...]] = field(default_factory=set)  # cell keys of the whole grid (every rank's share)
    failures: list[str] = field(default_factory=list)  # one line per failed cell: which, and why
    engine_starts: list[float] = field(default_factory=list)  # seconds of each engine start (an engine backend)


class Interrupted(Exception):
    """SIGINT or SIGTERM during a run: how many of the grid's cells the results file keeps (the
    CLI turns this into one line with the command that resumes)."""

    def __init__(self, kept: int, out: str | os.PathLike[str] | None, signal_name: str = "SIGINT") -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.kept, self.out, self.signal_name = kept, out, signal_name


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def is_oom(exc: BaseException) -> bool:
    import torch  # start-up: torch only where it runs

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


class MemoryResults:
    """Stands in for a ResultsFile when no --out is given (Python API)."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def done_cells(self) -> dict[tuple[str, ...], int]:
        return {}

    def add(self, rows: Iterable[Row]) -> None:

        new = [r.as_strings() for r in rows]
        keys = {cell_key(r) for r in new}
        self.records = [r for r in self.records if cell_key(r) not in keys] + new


Results = ResultsFile | MemoryResults  # where a run's rows go


def execute(
    jobs: list[Job],
    model: ModelConfig | Engine,
    out: str | os.PathLike[str] | None = None,
    resume: bool = True,
    seed: int = 0,
    console: Console | None = None,
    dry_run: bool = False,
    before_plan: Callable[[], None] | None = None,
) -> Outcome:
    """Run every job on one model load. ``model`` is a :class:`ModelConfig` or an already loaded
    model; ``console`` (a rich Console) shows the plan, progress with an ETA and the summary.
    ``before_plan``: what a dry run shows once every check has passed, before its plan (``ctxbench
    sweep``'s table per task and method).

    Everything a user can get wrong is checked before the plan is shown: the results file (never
    one that is not ctxbench's), the model's files (by loading it), and each task's preparation
    (its data, lengths too short for its prompt). A dry run checks what it can without loading."""

    check_seed(seed)
    jobs = [Job(job.task, s) for job in jobs for s in job.task.runs(job.settings)]  # --prompt-mode chat,completion: a run each
    check_grid_size(jobs)  # the product of every option, before anything enumerates it
    w = distributed.world()
    show = console if console is not None and w.rank == 0 else None
    if isinstance(model, ModelConfig):
        model.check(jobs)
        check_methods_on_model(jobs, model.model, model.trust_remote_code)  # from the config: no weights, no torch
    else:
        check_loaded(jobs, model)
    if dry_run:
        if out is not None:

            check_writable(out)
        if show is not None and before_plan is not None:
            before_plan()
        name = model.model if isinstance(model, ModelConfig) else model.name
        plan = plan_table(jobs, name, device=model.device, dtype=model.dtype) if isinstance(model, ModelConfig) else _plan_of(jobs, model)
        if show is not None:
            print_plan(show, plan, out)
            if out is not None and os.path.exists(out) and os.path.getsize(out) > 0:
                show.print(f"[dim]a dry run loads nothing, so it plans the whole grid: cells {out} already holds are counted "
                           "too (a run skips them, and its plan counts only the rest)[/]", highlight=False)  # fmt: skip
        return Outcome(records=[])
    results = _results(out, resume)  # a foreign or unwritable --out fails here, before anything loads
    distributed.init(w)
    run_id = distributed.shared(w, new_run_id())
    if isinstance(model, ModelConfig):
        model = replace(model, device=distributed.rank_device(model.device, w))
        lm = model.load(show)
    else:
        lm = model
    jobs = [Job(job.task, job.task.settled(lm, job.settings)) for job in jobs]  # model-implied defaults, once
    check_loaded(jobs, lm)  # again on the loaded model: a hub config read only now, the same words otherwise
    contexts = [job.task.prepare(lm, job.settings) for job in jobs]  # bad lengths or data fail before the plan
    lm.check_layouts(jobs)  # and a method whose frequencies do not fit the model's rotary tables
    lm.check_cells(jobs, contexts)  # or a cell past the end of an engine's rotary table
    cells = [c for job, ctx in zip(jobs, contexts, strict=True) for c in job.task.cells(job.settings, ctx)]
    lm.reserve(max((c.length for c in cells), default=0))  # the longest sequence an engine is started for

    shard = (w.rank, w.size) if w.active else None
    whole = _plan_of(jobs, lm)  # every cell: the progress bar's tokens per cell
    todo = [pending(lm, job, results, seed, run_id, shard, ctx) for job, ctx in zip(jobs, contexts, strict=True)]
    plan = _plan_of(jobs, lm, [Todo(tuple(p.grid), tuple(p.todo)) for p in todo])  # only what is left to run
    if show is not None:
        print_plan(show, plan, out)
        starts = lm.engine_starts([c for p in todo for c in p.todo])
        if starts:  # an engine backend: what it starts, on top of the forwards
            show.print(f"[dim]{lm.identity()}: {starts} engine start(s), one per method setting and factor "
                       "(and length, for a method that depends on it), each some seconds (the summary says how long)[/]",
                       highlight=False)  # fmt: skip
        if isinstance(model, ModelConfig) and plan.flops > CALIBRATE_ABOVE and lm.calibration():
            if not plan.measured:
                _calibrated(show, lm, plan)
            if any(factor is None for _, factor, _ in plan.paths):
                _path_factors(show, lm, jobs, lambda: _plan_of(jobs, lm, [Todo(tuple(p.grid), tuple(p.todo)) for p in todo]))
    outcome = Outcome(records=[], run_id=run_id, trained_len=lm.geometry.trained_len)

    try:
        with TokenProgress(show, lm) as progress:
            for i, job in enumerate(jobs):
                kw = dict(seed=seed, run_id=run_id, shard=shard, progress=progress, planned_tokens=whole.jobs[i].tokens,
                          ctx=contexts[i])  # fmt: skip
                if getattr(job.settings, "trials", None) == "auto":  # batches until the paired comparisons are decided

                    part = run_adaptive(run_task, lm, job, results, **kw)
                else:
                    part = run_task(lm, job, results, **kw)
                outcome.records += part.records
                outcome.ran, outcome.skipped, outcome.failed = outcome.ran + part.ran, outcome.skipped + part.skipped, outcome.failed + part.failed
                outcome.notes += [n for n in part.notes if n not in outcome.notes]
                outcome.failures += part.failures
                outcome.keys |= part.keys
    except KeyboardInterrupt as exc:  # every finished cell is already in the file (saved cell by cell)
        raise Interrupted(len(results.done_cells()), out, getattr(exc, "signal_name", "SIGINT")) from None
    finally:
        if isinstance(model, ModelConfig):
            lm.close()  # what this run started (vLLM's engine and its reserved KV cache), shut down with the run
    outcome.engine_starts = lm.start_seconds()
    if w.active:
        distributed.barrier(w)
        if out is not None:  # every rank's cells are in the file now

            outcome.records = [r for r in read_records(out) if cell_key(r) in outcome.keys]
        distributed.finish(w)
    if show is not None:
        _summarise(show, jobs, outcome, out)
    return outcome


def _plan_of(jobs: Sequence[Job], lm: Engine, pending: Sequence[Todo | None] | None = None) -> Plan:
    """The plan of a loaded model: its own trained length and size (of only the ``pending`` cells,
    one :class:`ctxbench.runner.plan.Todo` per job, when given)."""

    return plan_table(jobs, lm.name, lm.geometry.trained_len, device=lm.device, dtype=lm.dtype, size=lm.size(),
                      pending=pending, dtype_note=lm.dtype_note)  # fmt: skip


def _results(out: str | os.PathLike[str] | None, resume: bool) -> Results:
    if out is None:
        return MemoryResults()

    return ResultsFile(out, resume=resume)


def _summarise(show: Console, jobs: list[Job], outcome: Outcome, out: str | os.PathLike[str] | None) -> None:

    for note in outcome.notes:
        show.print(f"[yellow]{'' if note.startswith('warning:') else 'note: '}{note}[/]", markup=True)
    for table in summary_tables(outcome.records, outcome.trained_len, [j.task.name for j in jobs]):
        show.print(table)
    where = f" -> {out}" if out is not None else ""
    starts = getattr(outcome, "engine_starts", None)
    if starts:
        show.print(f"[dim]{len(starts)} engine start(s), {sum(starts):.0f} s in all[/]", highlight=False)
    show.print(f"[dim]{outcome.ran} cell(s) run, {outcome.skipped} resumed, {outcome.failed} failed{where}[/]")


# FLOPs of a run above which a first run on a device measures its throughput (~25 s of the
# default model on a 2-core CPU in float32, what the measurement itself costs: forwards of 1k and
# 4k tokens after a 4k warm-up, and decoding steps): a run shorter than that is not worth it.
CALIBRATE_ABOVE = 3e12


def _calibrated(show: Console, lm: Engine, plan: Plan) -> None:
    """First run on this device and dtype: time one short forward of the loaded model (cached
    for the next plans) and say what the whole run costs at that throughput."""

    try:
        rate = measured_rate(lm)
    except Exception as exc:  # noqa: BLE001  a model that cannot run a plain forward keeps the rough plan
        show.print(f"[dim]throughput not measured ({type(exc).__name__}: {exc})[/]", highlight=False)
        return
    show.print(f"[dim]measured {rate.linear / 1e9:.0f} GFLOP/s ({rate.attention / 1e9:.0f} in attention, "
               f"{rate.decode_linear / 1e9:.1f} decoding) for {lm.name} on "
               f"{lm.device} {lm.dtype}: about {plan.seconds_at(rate) / 60:.1f} min in all (cached for the next plans "
               "on this machine)[/]", highlight=False)  # fmt: skip


def _path_factors(show: Console, lm: Engine, jobs: Sequence[Job], replan: Callable[[], Plan]) -> None:
    """First run of an attention path on this device and dtype: time one forward of its first
    method (at its first factor) against a plain one (cached for the next plans), and say what the
    whole run costs with it."""

    try:
        rate = measured_rate(lm)  # cached by now, or measured just before
    except Exception:  # noqa: BLE001  no throughput (said above): the plan keeps its plain price
        return
    seen: set[str] = set()
    for job in jobs:
        for m in getattr(job.settings, "methods", ()):
            if not m.attention_path or m.attention_path in seen:
                continue
            seen.add(m.attention_path)
            factor = (getattr(job.settings, "factors", ()) or (1.0,))[0]
            try:
                cost = measured_factor(lm, m, factor, rate)
            except Exception as exc:  # noqa: BLE001  a method that cannot run here keeps the plain price
                show.print(f"[dim]cost of {m.label}'s attention not measured ({type(exc).__name__}: {exc})[/]", highlight=False)
                continue
            show.print(f"[dim]measured the attention of {m.label} ({m.attention_path} path) at {cost:.2f}x a plain forward's "
                       f"(cached for the next plans)[/]", highlight=False)  # fmt: skip
    show.print(f"[dim]about {replan().seconds / 60:.1f} min in all with it[/]", highlight=False)


@dataclass
class Pending:
    """What a job's run will do, before it runs: its grid, the groups of cells this process runs,
    which of them the results file does not hold yet, and how to write a cell's rows."""

    grid: list[Cell]  # this process's cells (its shard's, when sharded)
    full_grid: list[Cell]  # every cell of the job
    todo_groups: list[list[Cell]]  # the groups of cells still to run (each a list of cells)
    rows_for: Callable[[Cell, list[Measurement]], list[Row]]
    key_of: Callable[[Cell], tuple[str, ...]]  # cell -> its cell key
    notes: list[str]
    short: dict[tuple[str, ...], Cell]  # cell key -> cell, of the cells that hold fewer trials than asked

    @property
    def todo(self) -> list[Cell]:
        return [c for g in self.todo_groups for c in g]


def pending(lm: Engine, job: Job, results: Results, seed: int = 0, run_id: str | None = None, shard: tuple[int, int] | None = None,
            ctx: Context | None = None, select: Callable[[Cell], bool] | None = None) -> Pending:  # fmt: skip
    """The cells of ``job`` that ``results`` does not hold yet (see :func:`run_task`), computed the
    way the run computes them: ``execute`` plans only these, and ``run_task`` runs them."""
    import torch  # start-up: torch only where it runs
    import transformers  # start-up: transformers only where it runs


    task = job.task
    settings = job.settings
    ctx = task.prepare(lm, settings) if ctx is None else ctx
    ctx.seed = seed
    grid = task.cells(settings, ctx)
    # Groups come from the whole grid, so a cell's group (and, sharded, its rank) never depends
    # on what is already done; finished cells are dropped from their group afterwards.
    groups = task.groups(grid, settings)
    full_grid = grid
    if shard is not None:
        rank, world = shard
        groups = [g for i, g in enumerate(groups) if i % world == rank]
        grid = [c for g in groups for c in g]
    run_id = run_id or new_run_id()
    provenance = dict(
        backend=lm.identity(), run_id=run_id, model=lm.name, model_digest=lm.digest, dataset=ctx.dataset, data_digest=ctx.data_digest,
        device=lm.device, dtype=lm.dtype, seed=seed, options=json.dumps(task.identity(settings), sort_keys=True),
        ctxbench_version=__version__,
        torch_version=torch.__version__, transformers_version=transformers.__version__,
    )
    extra_all = {"trained_len": lm.geometry.trained_len}
    own_attention = lm.own_attention()
    if shard is not None:
        extra_all["rank"] = shard[0]
    for c in full_grid:  # a scaling method on a model without RoPE, a length past a learned position table
        check_applicable(c.method, lm.geometry, c.length)
    effective: dict[tuple[MethodSetting, float | None], Params] = {}  # (method, factor) -> every parameter after defaults
    for c in full_grid:
        if (c.method, c.factor) not in effective:
            effective[(c.method, c.factor)] = effective_params(c.method, lm.geometry, c.factor or 1.0)
    params_json = {k: json.dumps(v, sort_keys=True) for k, v in effective.items()}  # the rows' method_params
    notes = list(ctx.notes)
    for cell in grid:
        window = effective[(cell.method, cell.factor)].get("window")
        if cell.method.attention is not None and window is not None and window >= cell.length:
            note = (f"warning: {cell.method.label} window {window} >= length {cell.length}: no relative position reaches "
                    f"the window, so it equals plain RoPE there — use a smaller --param window")  # fmt: skip
            if note not in notes:
                notes.append(note)
    factors = sorted(set(settings.factors))

    def cell_fields(cell: Cell) -> dict[str, Any]:
        """The columns every row of ``cell`` shares: its identity and provenance."""
        return dict(
            task=cell.task, method=cell.method.name, label=cell.method.label,
            factor=cell.factor if cell.factor is not None else "", length=cell.length,
            stride=cell.stride if cell.stride is not None else "", depth=cell.depth if cell.depth is not None else "",
            variant=cell.variant, method_params=params_json[(cell.method, cell.factor)],
            **{**provenance, **dict(zip(("dataset", "data_digest"), ctx.data_of(cell.variant), strict=True))},
        )  # fmt: skip

    def rows_for(cell: Cell, measurements: list[Measurement]) -> list[Row]:
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        shared = cell_fields(cell)
        # every row says how many rows its cell has: a cell missing any (a hand edit) is partial
        cell_extra = {**extra_all, "cell_rows": len(measurements)}
        # the attention paths its group ran (methods.kernels: block-cpu-flash, whole-flash+cudnn, ...), else the model's own
        from ctxbench.methods import kernels  # torch: only once cells run (the CLI imports this module)

        cell_extra["attention_kernel"] = kernels.ran() or own_attention
        if cell.factor is None:  # run once for every factor of the grid (the method ignores it)
            cell_extra["factors"] = factors
        return [
            Row(
                time=now, trial=m.trial, doc=m.doc, metric=m.metric, value=m.value, tokens=m.tokens,
                seconds=m.seconds, status=m.status, mode=m.mode,
                answer=m.answer, extra=json.dumps({**m.extra, **cell_extra}, sort_keys=True),
                pos_start=m.pos[0] if m.pos else "", pos_end=m.pos[1] if m.pos and m.pos[1] is not None else "",
                **shared,
            )
            for m in measurements
        ]

    def key_of(cell: Cell) -> tuple[str, ...]:
        return cell_key(as_strings(cell_fields(cell)))

    done = results.done_cells()
    keys = {c: key_of(c) for c in grid}
    # A cell with fewer trials than now asked runs again (its trials are seeded by their index, so
    # the old ones come out the same and the new rows replace the old); one with more is kept.
    # (--trials all: each cell asks for its own variant's item count)
    wanted = {c: task.trials_asked(settings, c) for c in grid}
    chosen = set(grid) if select is None else {c for c in grid if select(c)}
    short = {keys[c]: c for c in chosen if 0 < done.get(keys[c], wanted[c]) < wanted[c]}
    todo_groups = [[c for c in g if c in chosen and (keys[c] not in done or keys[c] in short)] for g in groups]
    if short:
        asked = getattr(settings, "trials", "")
        notes.append(f"{len(short)} cell(s) in the results file hold fewer than --trials {asked} trials: their missing trials run now")
    return Pending(grid, full_grid, [g for g in todo_groups if g], rows_for, key_of, notes, short)


def run_task(
    lm: Engine,
    job: Job,
    results: Results,
    seed: int = 0,
    run_id: str | None = None,
    shard: tuple[int, int] | None = None,
    progress: TokenProgress | None = None,
    planned_tokens: int = 0,
    ctx: Context | None = None,
    select: Callable[[Cell], bool] | None = None,
) -> Outcome:
    """Run every cell of ``job``'s grid that ``results`` does not hold yet (:func:`pending`).

    ``select(cell) -> bool`` runs only the cells it picks (``--trials auto``'s later batches); the
    others stay as the file holds them. ``shard`` ``(rank, world)`` runs only the groups of cells whose index is ``rank`` modulo
    ``world``. A group that runs out of memory is retried cell by cell with smaller chunks; cells
    that still fail become rows with ``status = oom`` and the grid goes on.
    """
    import torch  # start-up: torch only where it runs


    task = job.task
    settings = task.settled(lm, job.settings)  # already settled by execute; a direct caller may not have
    torch.manual_seed(seed)
    ctx = task.prepare(lm, settings) if ctx is None else ctx
    run_id = run_id or new_run_id()
    p = pending(lm, Job(task, settings), results, seed, run_id, shard, ctx, select)
    grid, full_grid, todo_groups, rows_for, key_of = p.grid, p.full_grid, p.todo_groups, p.rows_for, p.key_of
    # the trials the file holds for a cell that now asks for more are reused: only the missing ones run
    ctx.kept = _kept_trials(results.records, p.short) if p.short else {}
    todo = sum(len(g) for g in todo_groups)
    outcome = Outcome(records=[], run_id=run_id, skipped=len(grid) - todo, notes=p.notes)
    outcome.keys = {key_of(c) for c in full_grid}
    if progress is not None:
        share = planned_tokens * todo / max(1, len(full_grid))
        progress.start_task(task.name, cells=todo, tokens=int(share), skipped=outcome.skipped)
    for group in todo_groups:
        finished: set[Cell] = set()
        from ctxbench.methods import kernels  # start-up: loads numpy, torch

        kernels.forget()  # each group's rows name the attention paths that group ran
        try:
            for cell, measurements in _run_with_retry(task, lm, ctx, group, settings, finished):
                bad = non_finite(measurements)
                if bad is not None:  # a failed cell, as an out-of-memory one: never rows that say ok
                    results.add(rows_for(cell, [Measurement("error", "", status=NON_FINITE, extra={"error": bad})]))
                    finished.add(cell)
                    outcome.failed += 1
                    outcome.failures.append(f"{cell.label()}: {bad}")
                    if progress is not None:
                        progress.cell_done(cell.label())
                    continue
                results.add(rows_for(cell, measurements))
                finished.add(cell)
                outcome.ran += 1
                if progress is not None:
                    progress.cell_done(cell.label())
        except Exception as exc:
            if not is_oom(exc):
                raise
            for cell in group:
                if cell in finished:
                    continue
                first_line = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
                results.add(rows_for(cell, [Measurement("error", "", status="oom", extra={"error": first_line})]))
                outcome.failed += 1
                outcome.failures.append(f"{cell.label()}: out of memory ({first_line})")
                if progress is not None:
                    progress.cell_done(cell.label())
    keys = {key_of(c) for c in grid}
    outcome.records = [r for r in results.records if cell_key(r) in keys]
    return outcome


# The status of a cell whose measurement came out inf or NaN (a forward whose logits overflowed): its
# one row says which value, and resume runs it again, as it does an out-of-memory (``oom``) cell.
NON_FINITE = "non-finite"


def non_finite(measurements: list[Measurement]) -> str | None:
    """What makes a cell's measurements unusable, or None: a value that is a number but not finite
    (``ppl = nan``). Such a row written ``ok`` would pass ``resume`` as done and reach the tables as a
    result; the cell fails instead, with one line naming the value."""
    for m in measurements:
        if m.status != "ok" or isinstance(m.value, (str, bool)) or m.value is None:
            continue
        if m.tokens == 0 or m.metric.endswith(("_lo", "_hi")) and m.extra.get("interval", "").startswith("none"):
            continue  # undefined by construction, not an overflow: a mean over no tokens, no interval of one value
        value = float(m.value)  # a Python or NumPy number
        if not math.isfinite(value):
            where = "".join(f" {k} {v}" for k, v in (("trial", m.trial), ("doc", m.doc)) if v != "")
            return f"{m.metric}{where} is {value} (not a finite number: the model's logits overflowed or went NaN)"
    return None


CELL_EXTRA = ("trained_len", "cell_rows", "factors", "rank", "attention_kernel")  # what rows_for adds to every row of a cell


def _kept_trials(records: list[Record], short: dict[tuple[str, ...], Cell]) -> dict[Cell, dict[int, Measurement]]:
    """{cell: {trial: Measurement}} of the numbered trial rows the file holds for ``short``
    ({cell key: cell}): cells that now ask for more trials keep these and run only the rest."""

    kept: dict[Cell, dict[int, Measurement]] = {}
    for r in records:
        cell = short.get(cell_key(r))
        trial = str(r.get("trial", ""))
        if cell is None or not trial.isdigit() or r.get("status", "ok") != "ok":
            continue
        extra = {k: v for k, v in json.loads(r.get("extra") or "{}").items() if k not in CELL_EXTRA}
        value = r["value"]
        kept.setdefault(cell, {})[int(trial)] = Measurement(
            r["metric"], int(value) if value.lstrip("-").isdigit() else float(value), trial=int(trial), doc=r.get("doc", ""),
            tokens=int(r["tokens"]) if r.get("tokens") else "", seconds=float(r["seconds"]) if r.get("seconds") else 0.0,
            answer=r.get("answer", ""), mode=r.get("mode", ""), extra=extra,
        )  # fmt: skip
    return kept


def _run_with_retry(task: Task, lm: Engine, ctx: Context, group: list[Cell], settings: Any,
                    finished: set[Cell]) -> Iterator[tuple[Cell, list[Measurement]]]:
    """Run a group; on out-of-memory, free the cache and retry the unfinished cells one by one
    with smaller chunks before giving up (the caller marks them ``oom``)."""
    import torch  # start-up: torch only where it runs

    try:
        yield from task.run_group(lm, ctx, group, settings)
        return
    except Exception as exc:
        if not is_oom(exc):
            raise
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    settings = task.shrunk(settings)
    for cell in group:
        if cell not in finished:
            yield from task.run_group(lm, ctx, [cell], settings)
