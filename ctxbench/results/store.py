"""Tidy result rows and the CSV file that holds them: atomic, resumable, schema-checked.

One row per measured value (docs/results-files.md). A *cell* is the unit of work that is
resumed (its identity: :mod:`ctxbench.results.identity`). Its rows — one per doc or trial and metric,
plus the aggregates — are written together, so a cell is either wholly in the file or not at all;
a cell that a hand edit left partial runs again. Columns a file has that ctxbench does not
know (a user's own notes) are kept on every write. A file that is not a ctxbench results file
is never overwritten, ``--no-resume`` or not; a symlinked file is written through its link. Every write goes to a temporary file in
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
import math
import os
import signal
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.errors import UserError
from ctxbench.outfiles import temp_beside, write_error
from ctxbench.parsing import (
    NotAFile,
    check_name_lengths,
    expand_path,
    kind_of,
    read_bounded,
    refuse_wide,
    short,
)
from ctxbench.results.identity import (
    IDENTITY,
    WITHIN,
    Record,
    cell_key,
    complete_options,
    drop_partial,
    finished,
    legacy_options,
    normalise,
    row_key,
)
from ctxbench.tasks import registry
from ctxbench.tasks.base import cell_text, check_records
from ctxbench.textsafe import csv_escape, csv_unescape

if TYPE_CHECKING:
    from _csv import Reader

    from ctxbench.tasks.base import Task

__all__ = ["COLUMNS", "CELL_KEY", "ROW_KEY", "Row", "ResultsFile", "atomic_write", "header_bytes", "locked", "read_records",
           "serialize", "write_records"]

COLUMNS = [
    "run_id", "time", "model", "model_digest", "dataset", "data_digest", "task", "method", "label",
    "factor", "length", "stride", "depth", "variant", "trial", "doc", "metric", "value", "tokens", "seconds",
    "status", "device", "dtype", "seed", "method_params", "options", "ctxbench_version", "torch_version",
    "transformers_version", "mode", "answer", "extra", "pos_start", "pos_end", "backend",
]  # fmt: skip
# Columns added after the first release: files without them still load (see read_records).
LATER_COLUMNS = {"label", "variant", "options", "pos_start", "pos_end", "backend"}

CELL_KEY = IDENTITY  # columns that identify a cell (the unit that is resumed and compared)
ROW_KEY = [*IDENTITY, *WITHIN]  # columns that identify one value inside a cell


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
    options: str  # JSON of the task options that are part of the cell's identity
    ctxbench_version: str
    torch_version: str
    transformers_version: str
    mode: str = ""
    answer: str = ""
    extra: str = ""
    pos_start: int | str = ""  # first target position of a loss-by-position bucket
    pos_end: int | str = ""  # one past its last
    backend: str = DEFAULT_BACKEND  # what ran it: hf (transformers), or an engine and its version ("vllm 0.32.0")

    def as_strings(self) -> dict[str, str]:
        return as_strings(asdict(self))


def as_strings(values: dict[str, Any]) -> dict[str, str]:
    """Column values as the CSV holds them (what :func:`ctxbench.results.identity.cell_key` reads)."""
    return {k: _fmt(v) for k, v in values.items()}


assert [f.name for f in fields(Row)] == COLUMNS


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # shortest exact round-trip form
    return str(value)


class ForeignFile(UserError):
    """A file that is not a ctxbench results CSV: never overwritten."""


def read_records(path: str | os.PathLike[str], must_exist: bool = True) -> list[dict[str, str]]:
    """Rows of a ctxbench CSV as dicts of strings, after checking it is one.

    Raises :class:`UserError` for a missing file, a CSV from another tool, or a truncated or
    damaged one (naming the line).
    """
    check_name_lengths(path, "results file")
    path = expand_path(path)
    try:  # only a regular file under the ceiling, opened without blocking: never a FIFO's hang or /dev/zero's MemoryError
        data = read_bounded(path, RESULTS_MOST)
    except NotAFile as exc:
        if exc.missing and not must_exist:
            return []
        if exc.missing:
            raise UserError(f"results file '{short(path)}' not found", "check the path, or run ctxbench to create it") from None
        if exc.reason == "a folder":
            raise UserError(f"'{short(path)}' is a directory, not a results CSV", "give the path of a .csv file") from None
        raise UserError(f"results file '{short(path)}' is {exc.reason}, not a results CSV",
                        "give the path of a results CSV written by ctxbench (a regular file)") from None  # fmt: skip
    return one_row_each(path, _parse(path, data)[1])


# The largest results file a reader takes: a million rows of about 500 bytes. Past that it is no
# results file (an 8 GB sparse file, /dev/zero behind a link), refused before a byte is read.
RESULTS_MOST = 1 << 30
# Metrics whose value a rerun measures anew (a timing, a memory peak): the same row twice with
# other values is a rerun appended, the later standing; any other metric's is a conflict.
VOLATILE_METRICS = frozenset({"tokens_per_s", "peak_mem_mb"})


def one_row_each(path: str | os.PathLike[str], records: list[dict[str, str]]) -> list[dict[str, str]]:
    """``records`` with each value once: a row given twice with the same value (a file appended
    to itself, a rerun that measured the same) is kept once; given twice with another value or
    status, it is a conflict no reader may settle by picking one (:class:`UserError` naming the
    cell, both values and the fix). A timing metric's later row stands (:data:`VOLATILE_METRICS`)."""
    at: dict[tuple[str, ...], int] = {}
    drop: set[int] = set()
    for i, r in enumerate(records):
        key = row_key(r)
        j = at.get(key)
        at[key] = i
        if j is None:
            continue
        first = records[j]
        if (first.get("value"), first.get("status")) != (r.get("value"), r.get("status")) and r.get("metric") not in VOLATILE_METRICS:

            def shown(x: dict[str, str]) -> str:
                return f"{x.get('metric')} {short(x.get('value', ''), 24) or 'blank'}" + (f" ({x.get('status')})" if x.get("status") != "ok" else "")

            raise UserError(f"'{short(path)}': {cell_text(r)} is given twice with different values (data rows {j + 1} and {i + 1}: "
                            f"{shown(first)}, then {shown(r)}): a conflict, not a rerun",
                            "keep the rows of one run (delete the other's), or delete every row of that cell and run it again")  # fmt: skip
        drop.add(j)
    return [r for i, r in enumerate(records) if i not in drop] if drop else records


def load_results(path: str | os.PathLike[str], tasks: dict[str, Task] | None = None) -> tuple[list[dict[str, str]], list[str]]:
    """The one validated reader of a results file: :func:`read_records` (a regular file under
    :data:`RESULTS_MOST`, UTF-8, a ctxbench header, typed key columns, each value once or a named
    conflict), then :func:`check_results`. ``compare`` in every mode reads through it; ``report`` and
    ``rank`` call :func:`check_results` on what they read (report keeps each row's id for ``--html``)."""
    return check_results(path, read_records(path), tasks)


def check_results(path: str | os.PathLike[str], records: list[dict[str, str]], tasks: dict[str, Task] | None = None) -> tuple[list[dict[str, str]], list[str]]:
    """``records`` read from ``path``, their partial cells left out
    (:func:`ctxbench.results.identity.drop_partial`; their descriptions returned), and every value
    in its metric's domain (:func:`ctxbench.tasks.base.check_records`: a text, empty or ``0,5`` value
    names the file and the cell, exit 2). The rows returned are the objects given."""
    tasks = registry() if tasks is None else tasks
    records, partial = drop_partial(records, tasks)
    check_records(records, tasks, where=f"'{path}': ")  # a value no run can produce: named, exit 2
    return records, partial


def _parse(path: Path, data: bytes) -> tuple[list[str], list[dict[str, str]]]:
    """(header, records) of a whole file's bytes."""
    refuse_wide(data, f"results file '{path}'")  # a spreadsheet's "Unicode text" save: text, not a foreign CSV
    text = data.decode("utf-8-sig", errors="replace")  # a spreadsheet's save adds a byte-order mark
    if not text.strip():
        raise UserError(f"results file '{path}' is empty", "delete it or point at a CSV written by ctxbench")
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    missing = [c for c in COLUMNS if c not in header and c not in LATER_COLUMNS]
    if missing:
        raise ForeignFile(
            f"'{path}' is not a ctxbench results CSV (missing columns: {', '.join(missing[:5])}{'...' if len(missing) > 5 else ''})",
            "give a CSV written by ctxbench (ppl, passkey, sweep, ...)",
        )
    if len(set(header)) != len(header):
        dup = next(c for c in header if header.count(c) > 1)
        raise UserError(f"'{path}' has the column '{dup}' twice (two files joined side by side, or a column pasted in)",
                        f"remove the second '{dup}' column: a results CSV names each column once")  # fmt: skip
    return header, _parse_rows(path, reader, header, text, line_offset=0)


def _parse_rows(path: Path, reader: Reader, header: list[str], text: str, line_offset: int) -> list[dict[str, str]]:
    records = []
    legacy = "options" not in header  # written before options were part of a cell's identity
    tasks = _registry()
    seen: dict[str, dict[str, Any] | None] = {}
    for values in reader:
        if not values:
            continue
        if len(values) != len(header):
            line = reader.line_num + line_offset
            raise UserError(
                f"'{path}' line {line} has {len(values)} fields, expected {len(header)}: the file is truncated or damaged",
                f"delete line {line} and the other rows of its cell (resuming re-runs that cell), or restore the file",
            )
        record = {k: csv_unescape(v) for k, v in zip(header, values, strict=True)}  # what serialize escaped
        _check_types(path, record, reader.line_num + line_offset)
        record.setdefault("variant", "")
        if legacy:
            record["options"] = legacy_options(record, tasks)
        else:  # an identity option added since the row was written takes the value that run used
            record["options"] = complete_options(record, tasks, seen)
        records.append(normalise(record))  # legacy rows normalised once, here; keys read plain columns
    if text and not text.endswith("\n"):
        raise UserError(f"'{path}' does not end with a newline: the file is truncated", "restore or regenerate it")
    return records


# Key columns a hand edit can break in ways every reader would trip over later: checked on load.
# (column, must be a whole number, may be empty)
_TYPED = (("length", True, False), ("seed", True, True), ("stride", True, True), ("factor", False, True), ("depth", False, True))


def _check_types(path: Path, record: dict[str, str], line: int) -> None:
    for column, whole, may_be_empty in _TYPED:
        text = record.get(column, "")
        if text == "" and may_be_empty:
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (whole and not value.is_integer()):
            what = ("a whole number" if whole else "a number") + (" or empty" if may_be_empty else "")
            raise UserError(f"'{path}' line {line}: {column} '{text[:20]}' is not {what}",
                            "fix that value, or delete the rows of its cell (resuming re-runs the cell)")  # fmt: skip


def _registry() -> dict[str, Task]:

    try:
        return registry()
    except UserError:
        return {}


def serialize(records: Iterable[Record], columns: list[str] = COLUMNS) -> str:
    """Rows as CSV text; a cell a spreadsheet would run as a formula (a label ``=HYPERLINK(...)``, an
    answer ``-2+3``) is written as text (:func:`ctxbench.textsafe.csv_escape`), read back as it was;
    a carriage return is written as a line feed (:func:`_one_newline`)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    for record in records:
        writer.writerow({c: csv_escape(_one_newline(_fmt(record.get(c, "")))) for c in columns})
    return buf.getvalue()


def _one_newline(text: str) -> str:
    """``\r\n`` and a lone ``\r`` as ``\n``: the file's rows end in ``\n``, so Python's ``csv``
    quotes a field holding ``\n`` but not one holding only ``\r``, which every reader, ctxbench's
    own included, then takes for the end of a row (a model's answer may hold one)."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def header_bytes(columns: list[str]) -> bytes:
    """The header line of a CSV of ``columns``, as :func:`serialize` writes a row."""
    return serialize([dict(zip(columns, columns, strict=True))], columns).encode()


HEADER = header_bytes(COLUMNS)


def target(path: str | os.PathLike[str]) -> Path:
    """Where writes to ``path`` go: through a symlink to the file it names (replacing the link by
    a plain file would detach a user's ``latest.csv -> runs/2026-11-24.csv``); ``~`` expanded."""
    check_name_lengths(path, "--out", spare=SPARE)  # before any stat, which a too-long name turns into a traceback
    path = expand_path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file every writer of ``path`` takes: ``.NAME.lock`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back while a cell is saved, so an interrupted run keeps the cell whole
    in both the file and memory (or in neither); a signal that arrives meanwhile is raised again at
    the end. The handlers are swapped for one that only notes the signal: a signal mask would not
    do, since the kernel hands a process-wide signal to any thread that does not block it (torch's
    worker threads), and Python then runs the main thread's handler mid-save. Only the main thread
    can swap handlers; a handler not installed from Python is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    old = {s: h for s, h in old.items() if h is not None}
    for s in old:
        signal.signal(s, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


LOCK_TIMEOUT = 600.0  # seconds; a writer holds the lock for one re-read and one write


@contextmanager
def locked(path: Path, lock: FileLock | None = None) -> Iterator[None]:
    """Held while ``path`` is re-read and rewritten: the file's lock (:func:`lock_path`, or ``lock``);
    a writer that waits past :data:`LOCK_TIMEOUT` stops with one line."""
    lock = lock or FileLock(str(lock_path(path)), timeout=LOCK_TIMEOUT)
    try:
        with lock:
            yield
    except Timeout:
        raise UserError(
            f"waited {LOCK_TIMEOUT:.0f} s for the lock on '{path}' ({lock_path(path)})",
            "another ctxbench writing to this file seems hung: stop it, or choose another --out",
        ) from None


def write_records(path: str | os.PathLike[str], records: Iterable[Record]) -> None:
    """Write rows atomically (temp file in the same directory, fsync, rename) under the file's lock."""
    path = target(path)
    check_writable(path)
    with locked(path):
        atomic_write(path, HEADER + serialize(records).encode()).close()


def atomic_write(path: Path, data: bytes) -> IO[bytes]:
    """Replace ``path`` by ``data`` via a fsynced temp file; returns the temp file, still open (its
    inode is now ``path``'s). Call with the lock held: any other temp file is a dead writer's. A
    full disk or a file-size limit leaves ``path`` as it was and no temp file: one line
    (:func:`ctxbench.outfiles.write_error`)."""
    _remove_stale_temps(path)
    tmp = temp_beside(path)
    f = None
    try:
        f = tmp.open("w+b")
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if f is not None:
            try:
                f.close()  # flushes what a full disk refused again, and fails again: the temp file goes either way
            except OSError:
                pass
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc, "every row written before is kept: the same command resumes") from None
        raise
    return f


# Bytes the files made beside a results file add to its name: ``.NAME.<pid>.tmp`` (the temp file
# of an atomic write, a pid of up to 7 digits) is the longest; ``.NAME.lock`` is shorter.
SPARE = len("." + "." + "9999999" + ".tmp")


def check_writable(path: str | os.PathLike[str]) -> None:
    """Fail early (before any model is loaded, on ``--dry-run`` too) if ``path`` cannot be written:
    a name too long for the filesystem (with room for the lock and temp files beside it), a
    folder that does not exist or is a file, a directory in its place, no permission."""
    check_name_lengths(path, "--out", spare=SPARE)
    path = expand_path(path)
    parent = path.parent if str(path.parent) else Path(".")
    blocker = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise UserError(f"cannot write '{path}': '{blocker}' is a file, not a folder", "choose another --out, in a folder")
    if not parent.is_dir():
        raise UserError(f"output directory '{parent}' does not exist", f"create it first (mkdir -p {parent}) or choose another --out")
    if path.is_dir():
        raise UserError(f"--out '{path}' is a directory", "give a file path such as results.csv")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # a FIFO would hang the resume's read, /dev/zero fill memory

        raise UserError(f"--out '{path}' is {kind_of(mode)}, not a results file", "give a file path such as results.csv")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"cannot write '{path}': permission denied", "choose a writable --out path")


def _remove_stale_temps(path: Path) -> None:
    """Temp files (``.NAME.*.tmp``) left by a killed writer. Only called with the lock held, when
    no live writer can have one open, so this holds across machines sharing the directory."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        tmp.unlink(missing_ok=True)


# What tells one version of a file from another: (device, inode, size, mtime in ns).
Stamp = tuple[int, int, int, int]


def _stamp(f: IO[bytes]) -> Stamp:
    st = os.fstat(f.fileno())
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _row_tuple(record: Record) -> tuple[str, ...]:
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

    def __init__(self, path: str | os.PathLike[str], resume: bool = True) -> None:
        check_writable(path)  # named as the user wrote it, as the dry run names it
        self.path = target(path)
        if self.path != expand_path(path):  # through a link: where the rows go must be writable too
            check_writable(self.path)
        self._lock = FileLock(str(lock_path(self.path)), timeout=LOCK_TIMEOUT)
        self._mutex = threading.RLock()
        self._held: IO[bytes] | None = None  # the version of the file we know, kept open
        self._stamp: Stamp | None = None  # its stamp; None: no file
        self._blob: bytes | None = b""  # its bytes, if its header is HEADER (else: rebuild on write)
        self._lines = 0  # newline count of _blob
        self._records: list[Record] = []
        self._columns = list(COLUMNS)  # ours, then any the file has that we do not know (kept)
        self._cells: set[tuple[str, ...]] = set()
        self._initial: set[tuple[str, ...]] | None = None  # resume=False: rows to drop at first write
        self._damaged: Stamp | None = None  # resume=False: stamp of an unreadable file to replace
        try:
            self._refresh()  # no lock needed to read: a rename swaps whole files
        except ForeignFile as exc:  # not ours: never overwritten, whatever --resume says
            raise ForeignFile(exc.what, "choose another --out (ctxbench never overwrites other files)") from None
        except UserError:
            if resume:
                raise
            self._damaged = self._stamp_of_path()  # ours but damaged: --no-resume starts it afresh
        if not resume:
            self._initial = {_row_tuple(r) for r in self._records}

    @property
    def records(self) -> list[Record]:
        """Rows of the file now (without the ones a ``resume=False`` run will drop at its first write)."""
        with self._mutex:
            self._sync()
            if not self._initial:
                return list(self._records)
            return [r for r in self._records if _row_tuple(r) not in self._initial]

    def done_cells(self) -> dict[tuple[str, ...], int]:
        """Cells whose rows are all ``ok`` and whole (failed or partial cells run again on resume),
        each with how many trials it holds (0 for a cell without trial rows), re-read if another
        writer changed the file."""
        with self._mutex:
            records = self.records
        return finished(records)

    def add(self, rows: Iterable[Row | Record]) -> None:
        """Save one cell's rows, replacing any earlier rows of the same cell, keeping every other row."""
        new = [normalise(r.as_strings() if isinstance(r, Row) else {c: _fmt(v) for c, v in dict(r).items()}) for r in rows]
        keys = {cell_key(r) for r in new}
        text = serialize(new)
        with self._mutex, locked(self.path, self._lock), signals_deferred():
            self._sync()
            self._damaged = None
            if self._initial or self._blob is None or keys & self._cells:
                drop = self._initial or set()
                self._records = [r for r in self._records if cell_key(r) not in keys and _row_tuple(r) not in drop] + new
                self._cells = {cell_key(r) for r in self._records}
                body = serialize(self._records, self._columns)
                blob = header_bytes(self._columns) + body.encode()
                self._lines = 1 + body.count("\n")
            else:
                self._records += new
                self._cells |= keys
                blob = (self._blob or HEADER) + text.encode()
                self._lines = (self._lines or 1) + text.count("\n")
            self._initial = None
            self._hold(atomic_write(self.path, blob), blob)

    def _sync(self) -> None:
        if self._damaged is not None and self._stamp_of_path() == self._damaged:
            self._forget()  # starting afresh over a file we cannot read: it counts as empty
        else:
            self._refresh()

    def _stamp_of_path(self) -> Stamp | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _forget(self) -> None:
        self._blob, self._lines, self._records, self._cells = b"", 0, [], set()
        self._columns = list(COLUMNS)

    def _hold(self, f: IO[bytes] | None, blob: bytes | None) -> None:
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
            if not data.strip():  # an empty file (touch results.csv) holds no rows: fill it
                f.close()
                self._forget()
                self._hold(None, b"")
                return
            if self._blob and self._lines and len(data) > len(self._blob) and data.startswith(self._blob):
                tail = data[len(self._blob):].decode("utf-8", errors="replace")  # rows appended by others
                new = _parse_rows(self.path, csv.reader(io.StringIO(tail)), COLUMNS, tail, line_offset=self._lines)
                self._records += new
                self._cells |= {cell_key(r) for r in new}
                self._lines += tail.count("\n")
                blob: bytes | None = data
            else:
                header, self._records = _parse(self.path, data)
                self._cells = {cell_key(r) for r in self._records}
                self._columns = COLUMNS + [c for c in header if c not in COLUMNS]
                blob = data if data.startswith(HEADER) and header == COLUMNS else None
                self._lines = data.count(b"\n")
        except BaseException:
            f.close()
            raise
        self._hold(f, blob)
