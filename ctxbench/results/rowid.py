"""A name for one row of a results file, which ``ctxbench report --html`` gives each trial and
``ctxbench show-prompt`` takes back. Two spellings:

- ``FILE@KEY`` (what the page writes): ``KEY`` is the first 12 hex digits of the sha256 of the row's
  identity and place in its cell (:data:`ctxbench.results.identity.IDENTITY` and ``WITHIN``: digests,
  task, method, parameters, factor, length, depth, variant, seed, dtype, options, backend, trial,
  document, metric). It names the same row whatever else the file holds: rows appended by a resumed
  run, a cell rerun and moved to the end, a merged file.
- ``FILE:N``: the ``N``-th row (from 1) of the rows ctxbench reads from ``FILE`` (a row repeated
  verbatim counts once), handy when reading a CSV by eye; a rerun that rewrites a cell renumbers
  the rows after it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ctxbench.errors import UserError
from ctxbench.results.identity import IDENTITY, WITHIN

KEY_DIGITS = 12


def key_of(record: dict[str, Any]) -> str:
    """The ``KEY`` of ``FILE@KEY``: a digest of the row's identity and place within its cell."""
    text = "\x1f".join(f"{c}={record.get(c, '')}" for c in [*IDENTITY, *WITHIN])
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]


def row_id(path: str, record: dict[str, Any]) -> str:
    """The ``FILE@KEY`` id of ``record``, a row of ``path``."""
    return f"{path}@{key_of(record)}"


def numbered(path: str) -> list[tuple[str, dict[str, str]]]:
    """Every row of ``path`` with its ``FILE@KEY`` id, in file order."""
    from ctxbench.results.store import read_records  # start-up: loads filelock

    return [(row_id(path, r), r) for r in read_records(path)]


def split(text: str) -> tuple[str, str, str]:
    """(path, ``@`` or ``:``, key or number) of an id; one clear line for anything else."""
    at, colon = text.rpartition("@"), text.rpartition(":")
    if at[1] and at[0] and len(at[2]) == KEY_DIGITS and all(c in "0123456789abcdef" for c in at[2]):
        return at[0], "@", at[2]
    if colon[1] and colon[0] and colon[2].isdigit() and int(colon[2]) >= 1:
        return colon[0], ":", colon[2]
    raise UserError(f"'{text}' is not a row id",
                    f"give FILE@KEY as `ctxbench report --html` shows it ({KEY_DIGITS} hex digits), or FILE:N, the row's number from 1")  # fmt: skip


def find(text: str) -> dict[str, str]:
    """The row an id names."""
    from ctxbench.results.store import read_records  # start-up: loads filelock

    path, kind, value = split(text)
    rows = read_records(path)
    if kind == ":":
        if int(value) > len(rows):
            raise UserError(f"'{path}' has {len(rows)} row(s), so there is no row {value}", f"give a row number from 1 to {len(rows)}")
        return rows[int(value) - 1]
    found = [r for r in rows if key_of(r) == value]
    if not found:
        raise UserError(f"'{path}' holds no row @{value}", "copy the id from the page of this file (the file may have been replaced since)")
    return found[0]
