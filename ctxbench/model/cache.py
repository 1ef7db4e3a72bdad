"""Caches that prove themselves: every entry ctxbench keeps on disk says what it is (a schema and
its version) and carries a digest of its content, and every read checks both before anything is
used.

Why: a cache is a shortcut around work whose answer goes into results. A token cache whose ids are
not the corpus's gave perplexities recorded as ``ok`` under the corpus's own digest; a throughput
cache of the wrong shape or with a zero rate crashed every plan; a dequantised model without its
tied embedding loaded in another engine and emitted token 0 forever. So a bad entry (unreadable,
truncated, the wrong shape or types, a value outside its meaning, a digest that does not match, a
companion file missing, a directory where a file should be, an older schema) is never used and
never a crash: it is dropped with one line on stderr (:func:`ignored`) and the work is done again.

One mechanism, three containers:

- :class:`JsonCache`: a JSON file of keyed entries (``digests.json``, ``geometry.json``, ``counts.json``,
  ``sizes.json``, ``rates.json``); each entry is ``{"value": ..., "sha256": ...}`` under a
  file-level schema stamp, and each kind declares a ``check`` of what its values mean.
- :func:`seal_dir` / :func:`verify_dir`: a directory of files (the dequantised GGUF model) with
  a manifest beside them naming every file, its size and its sha256.
- a file with its own metadata (the token cache, a safetensors file): :class:`Schema` stamps it and
  :func:`digest` binds each stored item to what it was computed from.

Everything here is stdlib: the model and task layers use it without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from ctxbench.errors import UserError
from ctxbench.parsing import NotAFile, read_bounded

MANIFEST = "ctxbench-cache.json"  # beside the files of a sealed cache directory


class BadEntry(ValueError):
    """Why a cache entry cannot be used; its message is the reason the note gives."""


def cache_root() -> Path:
    """ctxbench's cache directory: ``$CTXBENCH_CACHE`` (tests point it at a temporary directory),
    else ``~/.cache/ctxbench``."""
    root = os.environ.get("CTXBENCH_CACHE") or os.path.join("~", ".cache", "ctxbench")
    return Path(root).expanduser()


def digest(*parts: bytes) -> str:
    """sha256 of ``parts`` (each length-prefixed, so two splits of the same bytes differ)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def one_line(why: object) -> str:
    text = " ".join(str(why).split())
    return text if len(text) <= 200 else text[:197] + "..."


def ignored(where: object, why: object, then: str = "rebuilt") -> None:
    """The one line a bad entry costs: ``note: ignored a bad cache entry <where> (<why>); <then>``."""
    print(f"note: ignored a bad cache entry {where} ({one_line(why)}); {then}", file=sys.stderr, flush=True)


def discard(path: Path) -> None:
    """Remove a bad entry: a file, a link, or a directory (moved aside first, so no reader ever sees
    half a tree). A failure leaves it; it is checked again, and refused again, on the next read."""
    try:
        if path.is_dir() and not path.is_symlink():
            aside = path.with_name(f"{path.name}.bad-{os.getpid()}")
            os.replace(path, aside)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def write_atomic(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` through a temporary file and a rename, so a concurrent reader sees
    the old file or the new one; whatever is in the way (a directory) is removed first. False if it
    could not be written (a read-only home only costs the next run the work)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():
            discard(path)
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True
    except OSError:  # a full disk or a file-size limit: no half-written temp file left behind either
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False


@dataclass(frozen=True)
class Schema:
    """What an entry says it is: its kind and the version of its layout and meaning. A version is
    bumped whenever what is stored, or how it is computed, changes; older entries are then rebuilt."""

    kind: str
    version: int

    def stamp(self) -> dict[str, Any]:
        return {"schema": self.kind, "version": self.version}

    def check(self, found: object) -> None:
        if not isinstance(found, Mapping):
            raise BadEntry(f"a JSON {type(found).__name__}, not a ctxbench cache table")
        if "schema" not in found:
            raise BadEntry("no schema stamp: written by an older ctxbench, or not a ctxbench cache")
        if found["schema"] != self.kind:
            raise BadEntry(f"schema {found['schema']!r}, expected {self.kind!r}")
        if found.get("version") != self.version:
            raise BadEntry(f"version {found.get('version')!r} of {self.kind}, this ctxbench reads version {self.version}")


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


# The most bytes a JSON cache file or manifest holds: thousands of entries of a few hundred bytes
# each. Anything larger (an 8 GB sparse file, /dev/zero behind a link) is no cache of ours.
JSON_MOST = 64 << 20


def _read_json(path: Path, within: Path | None = None) -> Any:
    """The JSON in ``path``, or :class:`BadEntry` saying why there is none to read: only a regular
    file of at most :data:`JSON_MOST` bytes whose real place is inside ``within`` (the cache
    folder) is opened, without blocking (a FIFO never hangs a plan) and without reading a byte
    more than the ceiling (a sparse file or ``/dev/zero`` never fills memory)."""
    try:
        raw = read_bounded(path, JSON_MOST, within=within)
    except NotAFile as exc:
        raise BadEntry(f"{exc.reason} where a file should be" if exc.reason in ("a folder", "a FIFO (named pipe)") else
                       f"{exc.reason}, not a cache file") from None  # fmt: skip
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEntry(f"not valid JSON, truncated? ({exc})") from None


T = TypeVar("T")


@dataclass(frozen=True)
class JsonCache(Generic[T]):
    """One JSON file of keyed entries in the cache directory. ``check(value)`` says what a value
    must be to mean anything (raise :class:`BadEntry`, or any ValueError/TypeError/KeyError, with
    the reason); ``then`` is what happens instead of using a bad entry, for the note. ``T``: what
    a value that passes ``check`` is."""

    name: str
    schema: Schema
    check: Callable[[Any], object] = lambda value: None
    then: str = "rebuilt"

    @property
    def path(self) -> Path:
        return cache_root() / self.name

    def _verified(self, entry: object) -> T:
        if not isinstance(entry, Mapping) or set(entry) != {"value", "sha256"}:
            raise BadEntry("not a {value, sha256} entry")
        value = entry["value"]
        try:
            canonical = _canonical(value)
        except ValueError:  # NaN or infinity in the value: JSON that ctxbench never writes
            raise BadEntry("holds NaN or infinity") from None
        if entry["sha256"] != digest(canonical):
            raise BadEntry("digest mismatch: its sha256 is not that of its value (edited or damaged)")
        self._check(value)
        return value

    def _check(self, value: object) -> None:
        try:
            self.check(value)
        except BadEntry:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, UserError) as exc:
            raise BadEntry(one_line(exc) or type(exc).__name__) from None

    def entries(self) -> dict[str, T]:
        """The entries that verify. A bad file or entry is noted once, and the file is rewritten
        without it (so the next read is clean)."""
        path = self.path
        if not path.exists() and not path.is_symlink():
            return {}
        try:
            data = _read_json(path, within=cache_root())
            self.schema.check(data)
            table = data.get("entries")
            if not isinstance(table, Mapping):
                raise BadEntry("its entries are not a table")
        except BadEntry as why:
            ignored(path, why, self.then)
            discard(path)
            return {}
        good: dict[str, T] = {}
        bad = False
        for key, entry in table.items():
            try:
                good[key] = self._verified(entry)
            except BadEntry as why:
                ignored(f"{path} [{key}]", why, self.then)
                bad = True
        if bad:
            self._write(good)
        return good

    def get(self, key: str) -> T | None:
        return self.entries().get(key)

    def lookup(self, key: str, compute: Callable[[], T]) -> T:
        """The verified value under ``key``, else ``compute()`` (stored when it passes ``check``)."""
        known = self.entries()
        if key in known:
            return known[key]
        value = compute()
        try:
            self._check(value)
            _canonical(value)
        except (BadEntry, ValueError):
            return value  # nothing that would be refused on reading is written
        known[key] = value
        self._write(known)
        return value

    def _write(self, entries: Mapping[str, T]) -> None:
        table = {key: {"value": value, "sha256": digest(_canonical(value))} for key, value in entries.items()}
        write_atomic(self.path, json.dumps({**self.schema.stamp(), "entries": table}).encode())


def dataclass_fields(cls: type, value: object) -> None:
    """Check that ``value`` is a table of exactly the fields of dataclass ``cls``, each of its
    annotated type (an int is not a bool; a float is finite): for caches storing a dataclass as a
    dict, so a hand edit or another version's layout is refused before the object is built."""
    if not isinstance(value, Mapping):
        raise BadEntry(f"a JSON {type(value).__name__}, not a table of {cls.__name__} fields")
    names = [f.name for f in fields(cls)]
    odd = sorted(set(names) ^ set(value))
    if odd:
        raise BadEntry(f"fields missing or unknown: {', '.join(odd[:4])}")
    hints = typing.get_type_hints(cls)
    for name in names:
        if not _is(value[name], hints[name]):
            raise BadEntry(f"{name} is {value[name]!r}, not {getattr(hints[name], '__name__', hints[name])}")


def _is(value: object, hint: object) -> bool:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        kind = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if kind is bool and isinstance(value, bool):
            return True
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return True
        if kind in (str, dict, list) and isinstance(value, kind):
            return True
        if kind is tuple and isinstance(value, (list, tuple)):
            return True
    return False


def positive_number(value: object, name: str) -> float:
    """``value`` as a finite number > 0, else :class:`BadEntry` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadEntry(f"{name} is {value!r}, not a number")
    if not math.isfinite(value) or value <= 0:
        raise BadEntry(f"{name} is {value!r}, not a finite number > 0")
    return float(value)


def seal_dir(path: Path, schema: Schema) -> None:
    """Write the manifest of directory ``path``: its schema and every file's size and sha256."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
             for p in sorted(path.iterdir()) if p.is_file() and p.name != MANIFEST}  # fmt: skip
    (path / MANIFEST).write_text(json.dumps({**schema.stamp(), "files": files}, indent=1))


def verify_dir(path: Path, schema: Schema, required: Callable[[Mapping[str, object]], str | None] = lambda files: None) -> None:
    """Check a sealed directory against its manifest (sizes first, then every digest), or raise
    :class:`BadEntry`. ``required(files)`` names what the kind needs among the files, or None."""
    if not path.is_dir():
        raise BadEntry("a file where a directory should be")
    manifest = path / MANIFEST
    if not manifest.exists() and not manifest.is_symlink():
        raise BadEntry(f"no {MANIFEST} beside its files: written by an older ctxbench, or interrupted")
    found = _read_json(manifest, within=path)
    schema.check(found)
    files = found.get("files")
    if not isinstance(files, Mapping) or not files:
        raise BadEntry(f"{MANIFEST} lists no files")
    missing = required(files)
    if missing:
        raise BadEntry(missing)
    for name, meta in files.items():
        if not isinstance(meta, Mapping) or not isinstance(meta.get("bytes"), int) or not isinstance(meta.get("sha256"), str):
            raise BadEntry(f"{MANIFEST} entry {name!r} is not {{bytes, sha256}}")
        file = path / name
        if Path(name).name != name or not file.is_file():
            raise BadEntry(f"{name} is missing" if not file.exists() else f"{name} is not a file")
        if file.stat().st_size != meta["bytes"]:
            raise BadEntry(f"{name} is {file.stat().st_size} bytes, the manifest says {meta['bytes']}: truncated or replaced")
    for name, meta in files.items():
        try:
            ok = file_sha256(path / name) == meta["sha256"]
        except OSError as exc:
            raise BadEntry(f"{name} is unreadable: {exc.strerror or exc}") from None
        if not ok:
            raise BadEntry(f"{name}'s digest does not match the manifest")
