"""Task registry: a plain dict from task name to its module (see :mod:`ctxbench.tasks.base`)."""

from __future__ import annotations

from . import passkey, ppl

TASKS = {"ppl": ppl, "passkey": passkey}
