"""Tidy result rows and the CSV file that holds them: atomic, resumable, schema-checked.

One row per measured value (README "Results"). A *cell* is the unit of work that is
resumed: (model digest, data digest, task, method, method params, factor, length, stride, depth,
seed). Its rows — one per doc or trial and metric, plus the aggregates — are written together,
so a cell is either wholly in the file or not at all. Every write goes to a temporary file in
the same directory that is fsynced and renamed over the target: a killed run leaves a valid CSV
holding every cell it finished.

Any number of processes, on one machine or on several sharing a filesystem, may fill the same
CSV without losing a finished cell. Each cell is saved under an exclusive lock on the file
``.NAME.lock`` beside ``NAME`` (the ``filelock`` package: ``flock``, which NFS clients forward to
the server): re-read the file if another writer replaced it since we last saw it, replace that
cell's rows and keep all others, write the temp file, fsync, rename. The lock file holds no data
and is left in place (removing a lock file races with waiters); delete it only when no ctxbench
is running. Readers need no lock: a rename swaps whole files.
"""

from __future__ import annotations

import csv
import io
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from filelock import FileLock, Timeout

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


def _field(record: dict, column: str):
    """A key column's value; a row without a label has the label derived from its method."""
    if column == "label" and not record.get("label"):
        return derived_label(record.get("method", ""), record.get("method_params", ""))
    return record.get(column, "")


def cell_key(record: dict) -> tuple[str, ...]:
    return tuple(_norm(_field(record, c)) for c in CELL_KEY)


def row_key(record: dict) -> tuple[str, ...]:
    return tuple(_norm(_field(record, c)) for c in ROW_KEY)


def _norm(value) -> str:
    """Normalise numbers so '2', '2.0' and 2.0 compare equal in keys."""
    text = _fmt(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if number.is_integer() else repr(number)


def trials_by_cell(records: Iterable[dict]) -> dict[tuple[str, ...], int]:
    """The finished cells of ``records`` (every row ``ok``) and how many distinct numbered trials
    each holds; a cell of only summary rows (perplexity, or rows from before trials were rows) has 0."""
    trials: dict[tuple[str, ...], set[str]] = {}
    failed = set()
    for r in records:
        key = cell_key(r)
        if r.get("status") != "ok":
            failed.add(key)
        numbered = trials.setdefault(key, set())
        if str(r.get("trial", "")).isdigit():
            numbered.add(str(r["trial"]))
    return {key: len(t) for key, t in trials.items() if key not in failed}


def read_records(path: str | Path, must_exist: bool = True) -> list[dict[str, str]]:
    """Rows of a ctxbench CSV as dicts of strings, after checking it is one.

    Raises :class:`UserError` for a missing file, a CSV from another tool, or a truncated or
    damaged one (naming the line).
    """
    path = Path(path)
    if not path.exists():
        if must_exist:
            raise UserError(f"results file '{path}' not found", "check the path, or run ctxbench to create it")
        return []
    if path.is_dir():
        raise UserError(f"'{path}' is a directory, not a results CSV", "give the path of a .csv file")
    return _parse(path, path.read_bytes())[1]


def _parse(path: Path, data: bytes) -> tuple[list[str], list[dict[str, str]]]:
    """(header, records) of a whole file's bytes."""
    text = data.decode("utf-8", errors="replace")
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
    return header, _parse_rows(path, reader, header, text, line_offset=0)


def _parse_rows(path: Path, reader, header: list[str], text: str, line_offset: int) -> list[dict[str, str]]:
    records = []
    for values in reader:
        if not values:
            continue
        if len(values) != len(header):
            line = reader.line_num + line_offset
            raise UserError(
                f"'{path}' line {line} has {len(values)} fields, expected {len(header)}: the file is truncated or damaged",
                f"delete line {line} and the other rows of its cell (resuming re-runs that cell), or restore the file",
            )
        record = dict(zip(header, values, strict=True))
        if not record.get("label"):
            record["label"] = derived_label(record["method"], record["method_params"])
        record.setdefault("variant", "")
        records.append(record)
    if text and not text.endswith("\n"):
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


def _serialize(records: Iterable[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    for record in records:
        writer.writerow({c: _fmt(record.get(c, "")) for c in COLUMNS})
    return buf.getvalue()


HEADER = _serialize([dict(zip(COLUMNS, COLUMNS, strict=True))]).encode()


def lock_path(path: str | Path) -> Path:
    """The lock file every writer of ``path`` takes: ``.NAME.lock`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


LOCK_TIMEOUT = 600.0  # seconds; a writer holds the lock for one re-read and one write


@contextmanager
def _locked(path: Path, lock: FileLock | None = None) -> Iterator[None]:
    lock = lock or FileLock(str(lock_path(path)), timeout=LOCK_TIMEOUT)
    try:
        with lock:
            yield
    except Timeout:
        raise UserError(
            f"waited {LOCK_TIMEOUT:.0f} s for the lock on '{path}' ({lock_path(path)})",
            "another ctxbench writing to this file seems hung: stop it, or choose another --out",
        ) from None


def write_records(path: str | Path, records: Iterable[dict]) -> None:
    """Write rows atomically (temp file in the same directory, fsync, rename) under the file's lock."""
    path = Path(path)
    check_writable(path)
    with _locked(path):
        _atomic_write(path, HEADER + _serialize(records).encode()).close()


def _atomic_write(path: Path, data: bytes):
    """Replace ``path`` by ``data`` via a fsynced temp file; returns the temp file, still open (its
    inode is now ``path``'s). Call with the lock held: any other temp file is a dead writer's."""
    _remove_stale_temps(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    f = tmp.open("w+b")
    try:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        f.close()
        tmp.unlink(missing_ok=True)
        raise
    return f


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
    """Temp files (``.NAME.*.tmp``) left by a killed writer. Only called with the lock held, when
    no live writer can have one open, so this holds across machines sharing the directory."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)


def _stamp(f) -> tuple[int, int, int, int]:
    st = os.fstat(f.fileno())
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _row_tuple(record: dict) -> tuple[str, ...]:
    return tuple(_fmt(record.get(c, "")) for c in COLUMNS)


class ResultsFile:
    """A results CSV being filled cell by cell, possibly by several processes at once; rows already
    in it are kept and their cells skipped.

    The object keeps the version of the file it last read or wrote: its bytes, rows, and the file
    itself held open, so ``(device, inode, size, mtime)`` of the path equal to the held file's means
    "unchanged" (the held inode cannot be reused). ``add`` re-reads only when another writer
    replaced the file, and then only the rows appended after the bytes it knows when they are a
    prefix. ``resume=False`` drops the rows that were in the file when the object was made, at the
    first write; rows other writers add after that are kept.
    """

    def __init__(self, path: str | Path, resume: bool = True) -> None:
        self.path = Path(path)
        check_writable(self.path)
        self._lock = FileLock(str(lock_path(self.path)), timeout=LOCK_TIMEOUT)
        self._mutex = threading.RLock()
        self._held = None  # the version of the file we know, kept open
        self._stamp: tuple | None = None  # its stamp; None: no file
        self._blob: bytes | None = b""  # its bytes, if its header is HEADER (else: rebuild on write)
        self._lines = 0  # newline count of _blob
        self._records: list[dict] = []
        self._cells: set[tuple[str, ...]] = set()
        self._initial: set[tuple[str, ...]] | None = None  # resume=False: rows to drop at first write
        self._damaged: tuple | None = None  # resume=False: stamp of an unreadable file to replace
        try:
            self._refresh()  # no lock needed to read: a rename swaps whole files
        except UserError:
            if resume:
                raise
            self._damaged = self._stamp_of_path()
        if not resume:
            self._initial = {_row_tuple(r) for r in self._records}

    @property
    def records(self) -> list[dict]:
        """Rows of the file now (without the ones a ``resume=False`` run will drop at its first write)."""
        with self._mutex:
            self._sync()
            if not self._initial:
                return list(self._records)
            return [r for r in self._records if _row_tuple(r) not in self._initial]

    def done_cells(self) -> dict[tuple[str, ...], int]:
        """Cells whose rows are all ``ok`` (failed cells run again on resume), each with how many
        trials it holds (0 for a cell without trial rows), re-read if another writer changed the file."""
        with self._mutex:
            records = self.records
        return trials_by_cell(records)

    def add(self, rows: Iterable[Row | dict]) -> None:
        """Save one cell's rows, replacing any earlier rows of the same cell, keeping every other row."""
        new = [r.as_strings() if isinstance(r, Row) else {c: _fmt(v) for c, v in dict(r).items()} for r in rows]
        keys = {cell_key(r) for r in new}
        text = _serialize(new)
        with self._mutex, _locked(self.path, self._lock):
            self._sync()
            self._damaged = None
            if self._initial or self._blob is None or keys & self._cells:
                drop = self._initial or set()
                self._records = [r for r in self._records if cell_key(r) not in keys and _row_tuple(r) not in drop] + new
                self._cells = {cell_key(r) for r in self._records}
                body = _serialize(self._records)
                blob = HEADER + body.encode()
                self._lines = 1 + body.count("\n")
            else:
                self._records += new
                self._cells |= keys
                blob = (self._blob or HEADER) + text.encode()
                self._lines = (self._lines or 1) + text.count("\n")
            self._initial = None
            self._hold(_atomic_write(self.path, blob), blob)

    def _sync(self) -> None:
        if self._damaged is not None and self._stamp_of_path() == self._damaged:
            self._forget()  # starting afresh over a file we cannot read: it counts as empty
        else:
            self._refresh()

    def _stamp_of_path(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _forget(self) -> None:
        self._blob, self._lines, self._records, self._cells = b"", 0, [], set()

    def _hold(self, f, blob: bytes | None) -> None:
        if self._held is not None:
            self._held.close()
        self._held, self._stamp, self._blob = f, (_stamp(f) if f else None), blob

    def _refresh(self) -> None:
        """Bring the rows in memory up to the file's current version (cheap when unchanged)."""
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            if self._stamp is not None:  # deleted since: start from nothing
                self._forget()
                self._hold(None, b"")
            return
        stamp = _stamp(f)
        if stamp == self._stamp:
            f.close()
            return
        try:
            data = f.read()
            if self._blob and self._lines and len(data) > len(self._blob) and data.startswith(self._blob):
                tail = data[len(self._blob):].decode("utf-8", errors="replace")  # rows appended by others
                new = _parse_rows(self.path, csv.reader(io.StringIO(tail)), COLUMNS, tail, line_offset=self._lines)
                self._records += new
                self._cells |= {cell_key(r) for r in new}
                self._lines += tail.count("\n")
                blob = data
            else:
                header, self._records = _parse(self.path, data)
                self._cells = {cell_key(r) for r in self._records}
                blob = data if data.startswith(HEADER) and header == COLUMNS else None
                self._lines = data.count(b"\n")
        except BaseException:
            f.close()
            raise
        self._hold(f, blob)
