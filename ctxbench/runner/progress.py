"""Progress for people: tokens through the model, with an ETA that moves during a long forward.

A cell of a shared perplexity pass can take minutes, and all its lengths finish together, so
counting cells would sit at 0% with no ETA. Instead the backend reports tokens as they go through
(transformers: a forward pre-hook on every decoder layer advances the bar by ``batch x tokens /
layers`` as each layer starts): the bar moves through a forward pass, decoding steps included. The total is the plan's token estimate (it grows if the
run turns out to feed more).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from ctxbench.backends.base import Engine


class TokenProgress:
    """``with TokenProgress(console, lm) as p: p.start_task(...); p.cell_done(...)``; a no-op
    without a console (the Python API). The backend of ``lm`` says how forwards progress
    (:meth:`ctxbench.backends.base.Engine.watch`)."""

    def __init__(self, console: Console | None, lm: Engine) -> None:
        self.console = console
        self.lm = lm
        self.bar: Progress | None = None
        self.task_id: TaskID | None = None
        self.watching = False
        self._watch: AbstractContextManager[bool] | None = None
        self.cells = (0, 0)

    def __enter__(self) -> TokenProgress:
        if self.console is None:
            return self
        from rich.progress import (  # start-up: rich only where it runs
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} tokens"), TextColumn("{task.fields[cells]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=self.console, transient=False,
        )  # fmt: skip
        # a backend that cannot say how a forward progresses (an engine): the bar moves a cell's share at each cell
        self._watch = self.lm.watch(self._tokens)
        self.watching = self._watch.__enter__()
        self.bar.start()
        return self

    def _tokens(self, tokens: float) -> None:
        if self.task_id is not None:
            self._advance(tokens)

    def _advance(self, tokens: float) -> None:
        assert self.bar is not None and self.task_id is not None  # called once a task has started
        task = self.bar.tasks[self.task_id]
        if task.total is not None and task.completed + tokens > task.total:  # (every task here has a total)
            self.bar.update(self.task_id, total=task.completed + tokens)
        self.bar.advance(self.task_id, tokens)

    def start_task(self, name: str, cells: int, tokens: int, skipped: int = 0) -> None:
        if self.bar is None or self.console is None:  # (a bar has its console)
            return
        if skipped:
            self.console.print(f"[dim]{name}: {skipped} cell(s) already in the results file: skipped (use --no-resume to redo)[/]")
        self.cells = (0, cells)
        self.per_cell = tokens / max(1, cells)
        self.task_id = self.bar.add_task(name, total=max(1, tokens), cells=f"0/{cells} cells")

    def cell_done(self, label: str) -> None:
        if self.bar is None or self.task_id is None:
            return
        done, total = self.cells[0] + 1, self.cells[1]
        self.cells = (done, total)
        if not self.watching:
            self._advance(self.per_cell)
        self.bar.update(self.task_id, description=label, cells=f"{done}/{total} cells")
        if done == total:
            task = self.bar.tasks[self.task_id]
            self.bar.update(self.task_id, total=task.completed)

    def __exit__(self, *exc: object) -> None:
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch, self.watching = None, False
        if self.bar is not None:
            self.bar.stop()
