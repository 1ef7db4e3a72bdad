"""Run a task's grid on a loaded model: skip finished cells, write each cell as it lands.

Data flows one way: cli -> runner -> tasks -> rows -> results. The runner owns provenance
(model and data digests, versions, device, seed, method parameters after defaults) and the
resume logic; tasks only measure.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import torch
import transformers

from . import __version__
from .methods import effective_params
from .models import DEFAULT_MODEL, LoadedModel, load
from .results import ResultsFile, Row, cell_key
from .tasks import TASKS
from .tasks.base import Cell, Measurement


@dataclass
class ModelConfig:
    """How to load the model (CLI: --model --device --dtype --attn --device-map --trust-remote-code)."""

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    attn: str | None = "sdpa"
    trust_remote_code: bool = False
    device_map: str | None = None
    quantization: str | None = None

    def load(self) -> LoadedModel:
        return load(
            self.model, device=self.device, dtype=self.dtype, trust_remote_code=self.trust_remote_code,
            attn=self.attn, device_map=self.device_map, quantization=self.quantization,
        )


@dataclass
class RunResult:
    """What a task run produced: every record of its grid (new and resumed) and notes for people."""

    records: list[dict]
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    notes: list[str] = field(default_factory=list)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


class _MemoryResults:
    """Stands in for a ResultsFile when no --out is given (Python API)."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def done_cells(self) -> set:
        return set()

    def add(self, rows) -> None:
        new = [r.as_strings() for r in rows]
        keys = {cell_key(r) for r in new}
        self.records = [r for r in self.records if cell_key(r) not in keys] + new


def run_task(
    lm: LoadedModel,
    task: str,
    settings,
    out: str | os.PathLike | None = None,
    resume: bool = True,
    seed: int = 0,
    run_id: str | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_cell: Callable[[Cell, list[dict]], None] | None = None,
    shard: tuple[int, int] | None = None,
) -> RunResult:
    """Run every cell of ``settings``' grid that ``out`` does not hold yet.

    ``on_start(todo, skipped)`` and ``on_cell(cell, rows)`` drive progress displays. ``shard``
    ``(rank, world)`` runs only the groups of cells whose index is ``rank`` modulo ``world``.
    """
    if task not in TASKS:
        from .errors import unknown

        raise unknown("task", task, TASKS)
    module = TASKS[task]
    results = ResultsFile(out, resume=resume) if out is not None else _MemoryResults()
    torch.manual_seed(seed)
    ctx = module.prepare(lm, settings)
    grid = module.cells(settings, ctx)
    # Groups come from the whole grid, so a cell's group (and, sharded, its rank) never depends
    # on what is already done; finished cells are dropped from their group afterwards.
    groups = module.groups(grid, settings)
    if shard is not None:
        rank, world = shard
        groups = [g for i, g in enumerate(groups) if i % world == rank]
        grid = [c for g in groups for c in g]
    run_id = run_id or new_run_id()
    provenance = dict(
        run_id=run_id, model=lm.name, model_digest=lm.digest, dataset=ctx.dataset, data_digest=ctx.data_digest,
        device=lm.device, dtype=lm.dtype, seed=seed, ctxbench_version=__version__,
        torch_version=torch.__version__, transformers_version=transformers.__version__,
    )
    params: dict[tuple, str] = {}  # (method, factor) -> JSON of every parameter after defaults
    for c in grid:
        if (c.method, c.factor) not in params:
            params[(c.method, c.factor)] = json.dumps(effective_params(c.method, lm.geometry, c.factor), sort_keys=True)

    outcome_notes = list(getattr(ctx, "notes", []))
    for cell in grid:
        window = json.loads(params[(cell.method, cell.factor)]).get("window")
        if cell.method.attention is not None and window is not None and window >= cell.length:
            note = (f"warning: {cell.method.name} window {window} >= length {cell.length}: no relative position reaches "
                    f"the window, so it equals plain RoPE there — use a smaller --param window")  # fmt: skip
            if note not in outcome_notes:
                outcome_notes.append(note)

    def rows_for(cell: Cell, measurements: list[Measurement]) -> list[Row]:
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return [
            Row(
                time=now, task=cell.task, method=cell.method.name, factor=cell.factor, length=cell.length,
                stride=cell.stride if cell.stride is not None else "", depth=cell.depth if cell.depth is not None else "",
                trial=m.trial, doc=m.doc, metric=m.metric, value=m.value, tokens=m.tokens, seconds=m.seconds,
                status=m.status, method_params=params[(cell.method, cell.factor)], mode=m.mode, answer=m.answer,
                extra=json.dumps({**m.extra, "trained_len": lm.geometry.trained_len}, sort_keys=True), **provenance,
            )
            for m in measurements
        ]

    def key_of(cell: Cell) -> tuple:
        return cell_key(rows_for(cell, [Measurement("x", 0)])[0].as_strings())

    done = results.done_cells()
    todo_groups = [[c for c in g if key_of(c) not in done] for g in groups]
    todo_groups = [g for g in todo_groups if g]
    todo = sum(len(g) for g in todo_groups)
    outcome = RunResult(records=[], skipped=len(grid) - todo, notes=outcome_notes)
    if on_start:
        on_start(todo, outcome.skipped)
    for group in todo_groups:
        finished: set[Cell] = set()
        try:
            for cell, measurements in _run_with_retry(module, lm, ctx, group, settings, finished):
                rows = rows_for(cell, measurements)
                results.add(rows)
                finished.add(cell)
                outcome.ran += 1
                if on_cell:
                    on_cell(cell, [r.as_strings() for r in rows])
        except Exception as exc:
            if not is_oom(exc):
                raise
            for cell in group:
                if cell in finished:
                    continue
                rows = rows_for(cell, [Measurement("error", "", status="oom", extra={"error": str(exc).splitlines()[0][:200]})])
                results.add(rows)
                outcome.failed += 1
                if on_cell:
                    on_cell(cell, [r.as_strings() for r in rows])
    keys = {key_of(c) for c in grid}
    outcome.records = [r for r in results.records if cell_key(r) in keys]
    return outcome


def _run_with_retry(module, lm, ctx, group, settings, finished):
    """Run a group; on out-of-memory, free the cache and retry the unfinished cells one by one
    with smaller chunks before giving up (the caller marks them ``oom``)."""
    try:
        yield from module.run_group(lm, ctx, group, settings)
        return
    except Exception as exc:
        if not is_oom(exc):
            raise
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if hasattr(settings, "chunk"):
        settings.chunk = max(64, settings.chunk // 4)
    for cell in group:
        if cell not in finished:
            yield from module.run_group(lm, ctx, [cell], settings)
