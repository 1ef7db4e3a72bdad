"""What every task shares: the cell it measures and the measurements it yields.

A task module exposes ``Settings`` (a dataclass), ``cells(settings)``, ``prepare(lm, settings)``
returning a context with ``dataset`` and ``data_digest``, ``groups(cells, settings)`` and
``run_group(lm, context, group, settings)`` yielding ``(cell, [Measurement, ...])`` as each cell
finishes. Provenance (model, digests, versions, ...) is added by the runner, not by tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..methods import MethodSetting


@dataclass(frozen=True)
class Cell:
    """The unit of work that is resumed: one task, method, factor, length (and stride or depth)."""

    task: str
    method: MethodSetting
    factor: float
    length: int
    stride: int | None = None
    depth: float | None = None

    def label(self) -> str:
        parts = [self.task, self.method.name, f"x{self.factor:g}", f"{self.length}"]
        if self.depth is not None:
            parts.append(f"depth {self.depth:g}")
        return " ".join(parts)


@dataclass
class Measurement:
    """One value of a cell; the runner turns it into a :class:`ctxbench.results.Row`."""

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
