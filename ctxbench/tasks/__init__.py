"""Task registry: every entry point in the group ``ctxbench.tasks`` (built-in tasks included,
see ``pyproject.toml``) names a module attribute holding a :class:`ctxbench.tasks.base.Task`.

A plug-in fails alone: one that does not import, is not a ``Task``, is registered under a name
other than its task's, or takes a built-in's name is refused with one warning on stderr naming
its package and the fix, and every other task — the built-ins always — keeps working.

Loading reads only the task specs (no torch), so ``ctxbench --help`` stays fast. The registry is
read once per process (entry points do not change while it runs), so each warning shows once.
"""

from __future__ import annotations

import sys
from functools import cache
from importlib.metadata import entry_points

from ctxbench.errors import UserError, unknown
from ctxbench.tasks.base import Task

GROUP = "ctxbench.tasks"


def _package(ep) -> str:
    """The distribution that declares an entry point (its module when unknown)."""
    name = getattr(getattr(ep, "dist", None), "name", None)
    return name or ep.value.split(":")[0].split(".")[0]


def _builtin(ep) -> bool:
    return ep.value.startswith("ctxbench.")


def _refuse(ep, why: str, fix: str) -> None:
    print(f"warning: task plug-in '{ep.name}' from package '{_package(ep)}' ({ep.value}) is refused: {why} — {fix}", file=sys.stderr)


@cache
def registry() -> dict[str, Task]:
    """Every installed task by name: the built-ins first, then plug-ins in name order."""
    tasks: dict[str, Task] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (not _builtin(e), e.name)):
        try:
            task = ep.load()
        except Exception as exc:  # noqa: BLE001  a broken plug-in must not take the others down with it
            _refuse(ep, f"it failed to load ({type(exc).__name__}: {exc})", "fix or uninstall that package")
            continue
        if not isinstance(task, Task):
            _refuse(ep, f"it names a {type(task).__name__}, not a ctxbench Task",
                    "point the entry point at a module attribute TASK = ctxbench.tasks.base.Task(...)")  # fmt: skip
            continue
        if task.name != ep.name:
            _refuse(ep, f"it holds task '{task.name}'", f"name the entry point after its task: {task.name} = \"{ep.value}\"")
            continue
        if task.name in tasks:
            owner = "a built-in task" if not _builtin(ep) else "another task"
            _refuse(ep, f"'{task.name}' is already {owner}", "give the plug-in's task another name")
            continue
        tasks[task.name] = task
    if not tasks:
        raise UserError("no ctxbench tasks are registered", "reinstall ctxbench (bash scripts/setup.sh, or pip install -e .)")
    return tasks


def get(name: str, tasks: dict[str, Task] | None = None) -> Task:
    tasks = registry() if tasks is None else tasks
    if name not in tasks:
        raise unknown("task", name, tasks)
    return tasks[name]
