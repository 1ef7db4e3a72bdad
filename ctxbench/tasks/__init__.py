"""Task registry: every entry point in the group ``ctxbench.tasks`` (built-in tasks included,
see ``pyproject.toml``) names a module attribute holding a :class:`ctxbench.tasks.base.Task`.

Loading reads only the task specs (no torch), so ``ctxbench --help`` stays fast.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from ..errors import UserError, unknown
from .base import Task

GROUP = "ctxbench.tasks"


def registry() -> dict[str, Task]:
    """Every installed task by name, in entry-point order (built-ins first)."""
    tasks: dict[str, Task] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (not e.value.startswith("ctxbench."), e.name)):
        try:
            task = ep.load()
        except Exception as exc:  # a broken plug-in must not take the built-in tasks down with it
            import sys

            print(f"warning: task plug-in '{ep.name}' ({ep.value}) failed to load: {exc}", file=sys.stderr)
            continue
        if not isinstance(task, Task):
            raise UserError(f"entry point '{ep.name} = {ep.value}' in {GROUP} is not a ctxbench Task",
                            "point it at a module attribute TASK = ctxbench.tasks.base.Task(...)")  # fmt: skip
        if task.name != ep.name:
            raise UserError(f"entry point '{ep.name}' holds task '{task.name}'", "name the entry point after the task")
        tasks.setdefault(task.name, task)
    if not tasks:
        raise UserError("no ctxbench tasks are registered", "reinstall ctxbench (bash scripts/setup.sh, or pip install -e .)")
    return tasks


def get(name: str, tasks: dict[str, Task] | None = None) -> Task:
    tasks = registry() if tasks is None else tasks
    if name not in tasks:
        raise unknown("task", name, tasks)
    return tasks[name]
