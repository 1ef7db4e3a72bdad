"""Tidy result rows and the CSV file that holds them: atomic, resumable, schema-checked.

One row per measured value (DESIGN.md "Result rows"). A *cell* is the unit of work that is
resumed: (model digest, data digest, task, method, method params, factor, length, stride, depth,
seed). Its rows — one per doc or trial and metric, plus the aggregates — are written together,
so a cell is either wholly in the file or not at all. Every write goes to a temporary file in
the same directory that is fsynced and renamed over the target: a killed run leaves a valid CSV
holding every cell it finished.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .errors import UserError

COLUMNS = [
    "run_id", "time", "model", "model_digest", "dataset", "data_digest", "task", "method", "label",
    "factor", "length", "stride", "depth", "variant", "trial", "doc", "metric", "value", "tokens", "seconds",
    "status", "device", "dtype", "seed", "method_params", "ctxbench_version", "torch_version",
    "transformers_version", "mode", "answer", "extra",
]  # fmt: skip
# Columns added after the first release: files without them still load (see read_records).
LATER_COLUMNS = {"label", "variant"}

# Columns that identify a cell (the unit that is resumed and compared).
CELL_KEY = ["model_digest", "data_digest", "task", "method", "label", "method_params", "factor", "length", "stride", "depth", "variant", "seed"]
# Columns that identify one value inside a cell.
ROW_KEY = [*CELL_KEY, "trial", "doc", "metric"]


@dataclass
class Row:
    """One measured value with its provenance; field order is the CSV column order."""

    run_id: str
    time: str
    model: str
    model_digest: str
    dataset: str
    data_digest: str
    task: str
    method: str
    label: str
    factor: float | str  # "" for a method that ignores the factor (run once for every factor)
    length: int
    stride: int | str
    depth: float | str
    variant: str
    trial: int | str
    doc: str
    metric: str
    value: float | str
    tokens: int | str
    seconds: float | str
    status: str
    device: str
    dtype: str
    seed: int
    method_params: str
    ctxbench_version: str
    torch_version: str
    transformers_version: str
    mode: str = ""
    answer: str = ""
    extra: str = ""

    def as_strings(self) -> dict[str, str]:
        return {k: _fmt(v) for k, v in asdict(self).items()}


assert [f.name for f in fields(Row)] == COLUMNS


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # shortest exact round-trip form
    return str(value)


def cell_key(record: dict) -> tuple[str, ...]:
    return tuple(_norm(record.get(c, "")) for c in CELL_KEY)


def row_key(record: dict) -> tuple[str, ...]:
    return tuple(_norm(record.get(c, "")) for c in ROW_KEY)


def _norm(value) -> str:
    """Normalise numbers so '2', '2.0' and 2.0 compare equal in keys."""
    text = _fmt(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if number.is_integer() else repr(number)


def read_records(path: str | Path, must_exist: bool = True) -> list[dict[str, str]]:
    """Rows of a ctxbench CSV as dicts of strings, after checking it is one.

    Raises :class:`UserError` for a missing file, a CSV from another tool, or a truncated one.
    """
    path = Path(path)
    if not path.exists():
        if must_exist:
            raise UserError(f"results file '{path}' not found", "check the path, or run ctxbench to create it")
        return []
    if path.is_dir():
        raise UserError(f"'{path}' is a directory, not a results CSV", "give the path of a .csv file")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise UserError(f"results file '{path}' is empty", "delete it or point at a CSV written by ctxbench")
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    missing = [c for c in COLUMNS if c not in header and c not in LATER_COLUMNS]
    if missing:
        raise UserError(
            f"'{path}' is not a ctxbench results CSV (missing columns: {', '.join(missing[:5])}{'...' if len(missing) > 5 else ''})",
            "give a CSV written by ctxbench ppl/passkey/sweep",
        )
    records = []
    for lineno, values in enumerate(reader, start=2):
        if not values:
            continue
        if len(values) != len(header):
            raise UserError(
                f"'{path}' line {lineno} has {len(values)} fields, expected {len(header)}: the file is truncated or damaged",
                "re-run the sweep (finished cells are kept) or restore the file",
            )
        record = dict(zip(header, values, strict=True))
        if "label" not in record:
            record["label"] = derived_label(record["method"], record["method_params"])
        record.setdefault("variant", "")
        records.append(record)
    if not text.endswith("\n"):
        raise UserError(f"'{path}' does not end with a newline: the file is truncated", "restore or regenerate it")
    return records


def derived_label(method: str, params_json: str) -> str:
    """The label of a row written before labels existed: the method name plus every parameter
    that differs from a fixed registry default (values the method derives itself — ``auto`` —
    cannot be told from user-set ones, so they are left out)."""
    import json

    from .methods import METHODS, default_label

    try:
        params = json.loads(params_json) if params_json else {}
    except ValueError:
        return method
    defaults = {}
    for part in method.split("+"):
        if part in METHODS:
            defaults.update(METHODS[part].params)
    shown = {k: v for k, v in params.items() if defaults.get(k, 0) is not None}
    return default_label(method, shown, defaults)


def write_records(path: str | Path, records: Iterable[dict]) -> None:
    """Write rows atomically: temp file in the same directory, fsync, rename."""
    path = Path(path)
    check_writable(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
            writer.writeheader()
            for record in records:
                writer.writerow({c: _fmt(record.get(c, "")) for c in COLUMNS})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_writable(path: str | Path) -> None:
    """Fail early (before any model is loaded) if ``path`` cannot be written."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"output directory '{parent}' does not exist", f"create it first (mkdir -p {parent}) or choose another --out")
    if path.is_dir():
        raise UserError(f"--out '{path}' is a directory", "give a file path such as results.csv")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"cannot write '{path}': permission denied", "choose a writable --out path")


def _remove_stale_temps(path: Path) -> None:
    """Temp files left by a killed writer (``.NAME.PID.tmp`` whose process is gone)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            pid = int(tmp.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            tmp.unlink(missing_ok=True)
        except PermissionError:
            pass  # another user's live process


class ResultsFile:
    """A results CSV being filled cell by cell; rows already in it are kept and their cells skipped."""

    def __init__(self, path: str | Path, resume: bool = True) -> None:
        self.path = Path(path)
        check_writable(self.path)
        _remove_stale_temps(self.path)
        existing = read_records(self.path, must_exist=False) if self.path.exists() else []
        self.records: list[dict] = existing if resume else []
        self.replace_on_first_write = not resume and self.path.exists()

    def done_cells(self) -> set[tuple[str, ...]]:
        """Cells whose rows are all ``ok`` (failed cells run again on resume)."""
        failed = {cell_key(r) for r in self.records if r.get("status") != "ok"}
        return {cell_key(r) for r in self.records} - failed

    def add(self, rows: Iterable[Row | dict]) -> None:
        """Append one cell's rows (replacing an earlier failed attempt of the same cell) and save."""
        new = [r.as_strings() if isinstance(r, Row) else dict(r) for r in rows]
        keys = {cell_key(r) for r in new}
        self.records = [r for r in self.records if cell_key(r) not in keys] + new
        write_records(self.path, self.records)
