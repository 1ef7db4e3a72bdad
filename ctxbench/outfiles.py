"""Writing an output file whole or not at all, and saying why not in one line.

Every file ctxbench writes for a user (results and trials CSVs, ``summary.json``, ``verdict.csv``,
``niah.toml``, PNG plots, the HTML report) goes through :func:`replace_atomically`: the bytes go to a
temp file beside the target (``.NAME.<pid>.tmp``), are fsynced, and the temp file is renamed over
the target (POSIX ``rename`` is atomic on one filesystem). A full disk (``ENOSPC``), a file-size
limit (``EFBIG``, ``ulimit -f``), a quota or a read-only filesystem leaves the target as it was and
no temp file behind, and is one :class:`~ctxbench.errors.UserError` naming the file, never a
traceback or a truncated PNG.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

from ctxbench.errors import UserError

# What to do about each way a write fails (errno -> the fix); anything else: its own words.
FIXES = {
    errno.ENOSPC: "free some space on that disk, or write to another with --out",
    errno.EDQUOT: "free some of your disk quota, or write to another disk with --out",
    errno.EFBIG: "the file-size limit (ulimit -f) is below this file's size: raise it, or write a smaller output",
    errno.EROFS: "that filesystem is read-only: write to another with --out",
    errno.EACCES: "choose a folder you can write to",
    errno.EPERM: "choose a folder you can write to",
    errno.EIO: "the disk reported an I/O error: check it, or write to another with --out",
}


def write_error(path: str | Path, exc: OSError, kept: str = "") -> UserError:
    """One line for a failed write of ``path``: what the system said and what to do; ``kept`` says
    what survived (e.g. "the cells finished before are kept")."""
    why = exc.strerror or str(exc) or type(exc).__name__
    fix = FIXES.get(exc.errno or 0, "check the disk and the folder, or write elsewhere")
    return UserError(f"cannot write '{path}': {why}" + (f"; {kept}" if kept else ""), fix)


def temp_beside(path: Path) -> Path:
    """The temp file a write of ``path`` goes through (a dead writer's is removed by the next)."""
    return path.parent / f".{path.name}.{os.getpid()}.tmp"


def replace_atomically(path: str | Path, data: bytes, kept: str = "") -> None:
    """Replace ``path`` by ``data`` whole (temp file, fsync, rename), or raise :func:`write_error`
    with the target untouched and the temp file gone."""
    path = Path(path)
    tmp = temp_beside(path)
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(path, exc, kept) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_figure(fig, path: str | Path) -> None:
    """A matplotlib figure saved as ``path`` (its format from the suffix) whole or not at all: drawn
    into memory first, so a failed write never leaves a truncated image."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png")
    replace_atomically(path, buf.getvalue())
