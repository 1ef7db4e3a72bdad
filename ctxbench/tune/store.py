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
import time
from pathlib import Path

from ctxbench.errors import UserError
from ctxbench.tune.objective import Value

COLUMNS = [
    "run_id", "time", "model", "model_digest", "data_digest", "backend", "device", "dtype", "method", "trained_len",
    "target", "objective", "guard", "seed", "sampler", "split", "kind", "trial", "candidate", "label", "factor",
    "method_params", "instance", "value", "guard_value", "tokens", "seconds", "status", "reason", "units", "guard_units",
    "ctxbench_version", "torch_version", "transformers_version",
]  # fmt: skip
# What makes a stored evaluation this search's: the same numbers would come out.
IDENTITY = ("model_digest", "data_digest", "backend", "dtype", "method", "trained_len", "target", "objective", "seed")


def _units(text: str) -> tuple[tuple[float, float], ...]:
    return tuple((float(s), float(w)) for s, w in json.loads(text or "[]"))


class TrialsFile:
    """``path`` (``DIR/trials.csv``) holding this search's rows; ``base`` the provenance columns every
    row carries (:data:`IDENTITY` among them)."""

    def __init__(self, path: str | Path, base: dict, resume: bool = True) -> None:
        from ctxbench.results.store import check_writable, target

        self.path = target(path)
        check_writable(self.path)
        self.base = {k: str(v) for k, v in base.items()}
        self.rows: list[dict] = self._read() if self.path.exists() else []
        if not resume:
            self.rows = [r for r in self.rows if not self._mine(r)]

    def _read(self) -> list[dict]:
        text = self.path.read_text(encoding="utf-8", errors="replace")
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames is None or [c for c in ("kind", "candidate", "instance", "units") if c not in reader.fieldnames]:
            raise UserError(f"'{self.path}' is not a ctxbench tune trials file", "choose another --out directory")
        return list(reader)

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
        """Append rows (with the provenance columns) and rewrite the file atomically under its lock."""
        from ctxbench.results.store import _atomic_write, _locked

        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        full = [{**self.base, "time": stamp, **{k: _text(v) for k, v in r.items()}} for r in rows]
        with _locked(self.path):
            if self.path.exists():  # another writer's rows since we read: keep them
                mine = {tuple(r.get(c, "") for c in COLUMNS) for r in self.rows}
                self.rows += [r for r in self._read() if tuple(r.get(c, "") for c in COLUMNS) not in mine]
            self.rows += full
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
            writer.writeheader()
            writer.writerows({c: r.get(c, "") for c in COLUMNS} for r in self.rows)
            _atomic_write(self.path, buf.getvalue().encode()).close()

    def evaluation(self, split: str, trial, candidate: str, label: str, factor: float, params: str, value: Value) -> None:
        self.add([{"split": split, "kind": "instance", "trial": trial, "candidate": candidate, "label": label, "factor": factor,
                   "method_params": params, "instance": value.instance, "value": value.value if value.units else "",
                   "guard_value": value.guard_value if value.guard else "", "tokens": sum(w for _, w in value.units),
                   "seconds": round(value.seconds, 3), "status": "ok", "units": json.dumps(value.units),
                   "guard_units": json.dumps(value.guard)}])  # fmt: skip


def _text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def evaluations_in(path: str | Path) -> int:
    """Evaluation rows in a trials file (0 when there is none, or it cannot be read)."""
    try:
        with Path(path).open(newline="") as f:
            return sum(1 for r in csv.DictReader(f) if r.get("kind") == "instance")
    except (OSError, csv.Error):
        return 0
