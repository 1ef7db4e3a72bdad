"""Progress for people: tokens through the model, with an ETA that moves during a long forward.

A cell of a shared perplexity pass can take minutes, and all its lengths finish together, so
counting cells would sit at 0% with no ETA. Instead a forward pre-hook on every decoder layer
advances the bar by ``batch x tokens / layers`` as each layer starts: the bar moves through a
forward pass, decoding steps included. The total is the plan's token estimate (it grows if the
run turns out to feed more).
"""

from __future__ import annotations


def decoder_layers(model) -> list:
    """The model's stack of decoder layers (the ModuleList as long as ``num_hidden_layers``)."""
    import torch.nn as nn

    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return list(module)
    return []


class TokenProgress:
    """``with TokenProgress(console, model) as p: p.start_task(...); p.cell_done(...)``; a no-op
    without a console (the Python API)."""

    def __init__(self, console, model) -> None:
        self.console = console
        self.model = model
        self.bar = None
        self.task_id = None
        self.hooks: list = []
        self.cells = (0, 0)

    def __enter__(self) -> TokenProgress:
        if self.console is None:
            return self
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} tokens"), TextColumn("{task.fields[cells]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=self.console, transient=False,
        )  # fmt: skip
        # an engine backend has no torch module to hook: its bar moves a cell's share at each cell
        layers = decoder_layers(self.model) if self.model is not None else []
        for layer in layers:
            self.hooks.append(layer.register_forward_pre_hook(self._hook(len(layers)), with_kwargs=True))
        self.bar.start()
        return self

    def _hook(self, n_layers: int):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs.get("hidden_states")
            if hidden is not None and self.task_id is not None:
                self._advance(hidden.shape[0] * hidden.shape[1] / n_layers)

        return hook

    def _advance(self, tokens: float) -> None:
        task = self.bar.tasks[self.task_id]
        if task.completed + tokens > task.total:
            self.bar.update(self.task_id, total=task.completed + tokens)
        self.bar.advance(self.task_id, tokens)

    def start_task(self, name: str, cells: int, tokens: int, skipped: int = 0) -> None:
        if self.bar is None:
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
        if not self.hooks:
            self._advance(self.per_cell)
        self.bar.update(self.task_id, description=label, cells=f"{done}/{total} cells")
        if done == total:
            task = self.bar.tasks[self.task_id]
            self.bar.update(self.task_id, total=task.completed)

    def __exit__(self, *exc) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks = []
        if self.bar is not None:
            self.bar.stop()
