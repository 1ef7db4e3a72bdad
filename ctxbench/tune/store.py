"""The trials file of ``ctxbench tune``: a tidy CSV, one row per evaluation (a candidate on one
instance) and one per finished trial, each with its full provenance; what a killed search resumes from.

Rows are written as they land, with the results files' own machinery (:mod:`ctxbench.results.store`:
the file's lock, a fsynced temp file renamed over it), so a killed search leaves a valid CSV holding
every evaluation it finished. On resume, the evaluation rows whose identity (:data:`IDENTITY`: model,
data, backend, dtype, method, target, objective, seed) matches this search are read back as
:class:`~ctxbench.tune.objective.Value` s and never computed again; rows of another search in the same
file are kept.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

from ctxbench.errors import UserError
from ctxbench.parsing import check_name_lengths, expand_path, read_bounded, short
from ctxbench.textsafe import csv_unescape
from ctxbench.tune.objective import Value

COLUMNS = [
    "run_id", "time", "model", "model_digest", "data_digest", "backend", "device", "dtype", "method", "trained_len",
    "target", "objective", "guard", "seed", "sampler", "split", "kind", "trial", "candidate", "label", "factor",
    "method_params", "instance", "value", "guard_value", "tokens", "seconds", "status", "reason", "units", "guard_units",
    "ctxbench_version", "torch_version", "transformers_version",
]  # fmt: skip
# What makes a stored evaluation this search's: the same numbers would come out.
IDENTITY = ("model_digest", "data_digest", "backend", "dtype", "method", "trained_len", "target", "objective", "seed")


def _key(row: dict) -> tuple[str, ...]:
    return tuple(row.get(c, "") for c in ROW_KEY)


def _written(row: dict) -> tuple[str, ...]:
    """A row as one write made it (its place, time and value): what ``--no-resume`` drops for good."""
    return (*_key(row), row.get("time", ""), row.get("value", ""))


def _units(text: str) -> tuple[tuple[float, float], ...]:
    return tuple((float(s), float(w)) for s, w in json.loads(text or "[]"))


# What names a search for the user, readable before the model loads (the digests come with it).
SEARCH = ("method", "objective", "target", "trained_len", "seed")
# One row's place: a rerun that computes the same row replaces it, never appends it again.
ROW_KEY = (*IDENTITY, "split", "kind", "trial", "candidate", "instance")


def _read_rows(path: Path) -> list[dict]:
    """The rows of a tune trials file, or one line saying it is none (another tool's ``trials.csv``)."""
    from ctxbench.results.store import RESULTS_MOST  # start-up: loads filelock

    text = read_bounded(path, RESULTS_MOST).decode("utf-8-sig", errors="replace")
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or [c for c in ("kind", "candidate", "instance", "units", *IDENTITY) if c not in reader.fieldnames]:
        raise UserError(f"'{short(path)}' is not a ctxbench tune trials file (another tool's?)",
                        "give the search its own --out directory (ctxbench never overwrites other files)")  # fmt: skip
    return [{k: csv_unescape(v or "") for k, v in r.items() if k is not None} for r in reader]


def _describe(row: dict) -> str:
    return f"{row.get('method')} ({row.get('objective')}) at {row.get('target')} tokens, seed {row.get('seed')}"


def check_out(out: str | Path, search: dict, resume: bool) -> None:
    """``--out DIR`` is this search's own, checked before anything loads (the dry run too): a folder
    (or a path one can be made at: no file on the way, no dangling link, writable), holding no
    other tool's ``trials.csv`` and no other search's (another method, objective, target, trained
    length or seed: ``search``'s :data:`SEARCH` values), unless ``--no-resume`` replaces it."""
    check_name_lengths(str(out), "--out")
    out = expand_path(out)
    if out.is_symlink() and not out.exists():
        raise UserError(f"--out '{short(out)}' is a link to '{os.readlink(out)}', which does not exist",
                        "remove the link, or point --out at a folder")  # fmt: skip
    blocker = next((p for p in (out, *out.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        where = "is a file" if blocker == out else f"is under '{short(blocker)}', a file"
        raise UserError(f"--out '{short(out)}' {where}, not a folder", "give the search a folder of its own, e.g. --out tune-yarn")
    if blocker is not None and not os.access(blocker, os.W_OK | os.X_OK):
        raise UserError(f"cannot write in '{short(blocker)}': permission denied or a read-only filesystem", "choose a --out folder you can write to")
    trials = out / "trials.csv"
    if trials.exists() or trials.is_symlink():
        if not trials.is_file():
            raise UserError(f"'{short(trials)}' is not a regular file", "give the search its own --out directory")
        rows = _read_rows(trials)
        other = next((r for r in rows if any(r.get(k, "") != str(search.get(k, "")) for k in SEARCH)), None)
        if other is not None and resume:
            raise UserError(f"--out '{short(out)}' holds another search: {_describe(other)}",
                            "give each search its own --out, or pass --no-resume to replace that one")  # fmt: skip


class OutLock:
    """Held for a whole search: a second ``ctxbench tune`` on the same ``--out`` stops at once with
    one line, rather than computing every evaluation again beside the first and writing each twice."""

    def __init__(self, out: Path) -> None:
        from filelock import FileLock  # optional: filelock only where it is used

        self.out, self.lock = out, FileLock(str(out / ".tune.lock"))

    def __enter__(self) -> OutLock:
        from filelock import Timeout  # optional: filelock only where it is used

        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            raise UserError(f"another ctxbench tune is running on --out '{self.out}'",
                            "wait for it to finish (the same command then resumes from its trials), or give this search another --out") from None  # fmt: skip
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()


class TrialsFile:
    """``path`` (``DIR/trials.csv``) holding this search's rows; ``base`` the provenance columns every
    row carries (:data:`IDENTITY` among them). The folder is the search's own: rows of another
    search there are refused (:func:`check_out`), or, with ``resume=False``, replaced."""

    def __init__(self, path: str | Path, base: dict, resume: bool = True) -> None:
        from ctxbench.results.store import check_writable, target  # start-up: loads filelock

        self.path = target(path)
        check_writable(self.path)
        self.base = {k: str(v) for k, v in base.items()}
        self.rows: list[dict] = _read_rows(self.path) if self.path.exists() else []
        other = next((r for r in self.rows if not self._mine(r)), None)
        if other is not None and resume:
            raise UserError(f"'{self.path.parent}' holds the trials of another search (another model, data, backend or dtype: "
                            f"{other.get('model')} {other.get('model_digest')}, data {other.get('data_digest')})",
                            "give each search its own --out, or pass --no-resume to replace that one")  # fmt: skip
        # --no-resume: the rows there now are dropped at the first write, and never read back
        self.dropped = {_written(r) for r in self.rows} if not resume else set()
        if not resume:
            self.rows = []

    def _mine(self, row: dict) -> bool:
        return all(row.get(k, "") == self.base.get(k, "") for k in IDENTITY)

    def cached(self, split: str) -> dict[tuple[str, str], Value]:
        """``{(candidate, instance): Value}`` of this search's finished evaluations on ``split``."""
        out = {}
        for r in self.rows:
            if self._mine(r) and r["kind"] == "instance" and r["split"] == split:
                out[(r["candidate"], r["instance"])] = Value(r["instance"], _units(r["units"]), _units(r["guard_units"]),
                                                             float(r["seconds"] or 0))  # fmt: skip
        return out

    def add(self, rows: list[dict]) -> None:
        """Add rows (with the provenance columns), each replacing an earlier row of the same place
        (:data:`ROW_KEY`: a resumed search's trial rows are not appended again), and rewrite the file
        atomically under its lock; rows another writer added since are kept."""
        from ctxbench.results.store import (  # start-up: loads filelock
            as_strings,
            atomic_write,
            header_bytes,
            locked,
            serialize,
        )

        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        full = [{**self.base, "time": stamp, **as_strings(r)} for r in rows]
        with locked(self.path):
            if self.path.exists():  # another writer's rows since we read: keep them
                mine = {tuple(r.get(c, "") for c in COLUMNS) for r in self.rows}
                self.rows += [r for r in _read_rows(self.path) if tuple(r.get(c, "") for c in COLUMNS) not in mine
                              and _written(r) not in self.dropped]  # fmt: skip
            new = {_key(r) for r in full}
            self.rows = [r for r in self.rows if _key(r) not in new] + full
            atomic_write(self.path, header_bytes(COLUMNS) + serialize(self.rows, COLUMNS).encode()).close()

    def evaluation(self, split: str, trial, candidate: str, label: str, factor: float, params: str, value: Value) -> None:
        self.add([{"split": split, "kind": "instance", "trial": trial, "candidate": candidate, "label": label, "factor": factor,
                   "method_params": params, "instance": value.instance, "value": value.value if value.units else "",
                   "guard_value": value.guard_value if value.guard else "", "tokens": sum(w for _, w in value.units),
                   "seconds": round(value.seconds, 3), "status": "ok", "units": json.dumps(value.units),
                   "guard_units": json.dumps(value.guard)}])  # fmt: skip


def evaluations_in(path: str | Path) -> int:
    """Evaluation rows in a trials file (0 when there is none, or it cannot be read)."""
    try:
        with Path(path).open(newline="") as f:
            return sum(1 for r in csv.DictReader(f) if r.get("kind") == "instance")
    except (OSError, csv.Error):
        return 0
