"""Parsing of the small value languages the CLI and suite files share: ``16k`` lengths,
comma lists, ``key=value`` method parameters."""

from __future__ import annotations

import errno
import json
import os
import re
import select
import stat
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path

from ctxbench.errors import UserError

_LENGTH = re.compile(r"^(\d+)([kKmM]?)$")
# The longest length ctxbench takes, 16m tokens: past every released model's context (10m at the
# most), and a number a typo makes (4000k for 4k) is refused at once instead of planned or allocated.
MOST_LENGTH = 2**24
# The largest scale factor, 2^24: s*L passes MOST_LENGTH for every trained length L >= 1, so a larger
# factor (a typo, 1e308) means nothing and is refused before any formula overflows with it.
MOST_FACTOR = 2**24


def parse_length(text: str, what: str = "length") -> int:
    """``16k`` -> 16384 (k = 1024, m = 1024**2); plain positive integers as they are. ``what``
    names the value in errors (``--stride``), so a message blames what the user typed."""
    text = str(text).strip()
    m = _LENGTH.match(text)
    if not m:
        raise UserError(
            f"bad {what} '{short(text, 40)}'",
            "write a positive whole number of tokens such as 4096, 4k or 16k (k = 1024)",
        )
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 12:  # past 16m whatever the unit (and past int()'s 4300 digits)
        raise UserError(f"{what} '{short(text, 40)}' is above the longest ctxbench takes, 16m ({MOST_LENGTH:,})",
                        f"use a {what} of at most 16m" + (", e.g. 128k" if what == "length" else ""))  # fmt: skip
    value = int(digits) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2).lower()]
    if value <= 0:
        raise UserError(f"bad {what} '{text}': it must be at least 1 token", "use e.g. 4k or 16k")
    if value > MOST_LENGTH:
        raise UserError(f"{what} '{short(text, 40)}' is {value:,} tokens, above the longest ctxbench takes, 16m ({MOST_LENGTH:,})",
                        f"use a {what} of at most 16m" + (", e.g. 128k" if what == "length" else ""))  # fmt: skip
    return value


def split_list(text: str | int | float | list | tuple, what: str = "list") -> list[str]:
    """``"a,b, c"`` -> ``["a", "b", "c"]``; lists pass through as strings.

    Strict: an empty item (``2k,,4k``, a trailing comma) is an error rather than silently dropped,
    because it usually means a value was lost while editing a command.
    """
    if isinstance(text, (list, tuple)):
        items = [str(t).strip() for t in text]
    else:
        items = [t.strip() for t in str(text).split(",")]
    if not items or all(not t for t in items):
        raise UserError(f"empty {what} '{text}'", "give at least one value, comma separated")
    if any(not t for t in items):
        raise UserError(f"empty item in {what} '{text}'", "remove the extra comma, e.g. 2k,4k")
    return items


def _split_outside(text: str, what: str, brackets: str, example: str) -> list[str]:
    """``text`` split at the commas outside the ``brackets`` (pairs: ``"()[]"``), each item stripped;
    an unbalanced bracket or an empty item is one error naming ``what`` and the whole text."""
    opens, closes = brackets[0::2], brackets[1::2]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
            if depth < 0:
                raise UserError(f"bad {what} '{text}': a '{ch}' closes nothing", f"balance the brackets, e.g. {example}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise UserError(f"bad {what} '{text}': a bracket is never closed", f"balance the brackets, e.g. {example}")
    items = [t.strip() for t in [*parts, text[start:]]]
    if all(not t for t in items):
        raise UserError(f"empty {what} '{text}'", "give at least one value, comma separated")
    if any(not t for t in items):
        raise UserError(f"empty item in {what} '{text}'", "remove the extra comma")
    return items


def split_methods(text: str | Sequence[str], what: str = "--method") -> list[str]:
    """``"none,yarn(beta_fast=24,beta_slow=2)"`` -> ``["none", "yarn(beta_fast=24,beta_slow=2)"]``:
    commas inside ``(...)`` or ``[...]`` belong to one method spec (its parameters; a list value),
    so a label as reports print it (``yarn(beta_fast=24,beta_slow=2)``) is one item."""
    if isinstance(text, (list, tuple)):
        return split_list(text, what)
    return _split_outside(str(text), what, "()[]{}", "--method 'yarn(beta_fast=24)'")


def _unique(values: list, items: list[str], what: str) -> list:
    """Values given twice (``2k,2048``; ``2,2.0``) are an error naming both spellings."""
    seen: dict = {}
    for value, item in zip(values, items, strict=True):
        if value in seen:
            raise UserError(f"{what} {item} is given twice ({seen[value]} and {item})", f"list each {what} once")
        seen[value] = item
    return values


def parse_lengths(text) -> list[int]:
    """``"4k,2k"`` -> ``[2048, 4096]`` (sorted; duplicates are an error)."""
    items = split_list(text, what="length list")
    return sorted(_unique([parse_length(t) for t in items], items, "length"))


def parse_factor(text) -> float:
    """A scale factor: a finite number from 1 to :data:`MOST_FACTOR`."""
    shown = short(str(text).strip(), 40)
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UserError(f"bad factor '{shown}': not a number", "use a number >= 1 such as 2 or 4") from None
    if value in (float("inf"), float("-inf")) and _decimal_is_finite(text):  # 400 digits: a number, too large for a float
        value = float("inf") if not str(text).strip().startswith("-") else float("-inf")
        if value > 0:
            raise UserError(f"bad factor '{shown}': it must be <= {MOST_FACTOR:,} (2^24)", "use e.g. 2, 4 or 8")
    if value != value or value in (float("inf"), float("-inf")):
        raise UserError(f"bad factor '{shown}': it is not a finite number", "use a number >= 1 such as 2 or 4")
    if not value >= 1.0:
        raise UserError(
            f"bad factor '{shown}': it must be >= 1",
            "a factor s stretches the trained context L to s*L; use 1 for none, 2, 4, ...",
        )
    if value > MOST_FACTOR:
        raise UserError(f"bad factor '{shown}': it must be <= {MOST_FACTOR:,} (2^24)",
                        "a factor s stretches the trained context L to s*L, and past that even L = 1 passes the longest "
                        "length ctxbench takes (16m); use e.g. 2, 4 or 8")  # fmt: skip
    return value


def _decimal_is_finite(text) -> bool:
    """Whether ``text`` is a finite decimal number however many digits (``float`` turns 400 nines into inf)."""
    try:
        return Decimal(str(text).strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False


def parse_factors(text) -> list[float]:
    """``"2,4"`` -> ``[2.0, 4.0]`` in the given order; duplicates are an error."""
    items = split_list(text, what="factor list")
    return _unique([parse_factor(t) for t in items], items, "factor")


def parse_value(text: str):
    """A parameter value: JSON number/bool/list if it parses, else the string (``2k``, a file name).
    Its type is checked where the method is resolved, against the parameter's declaration."""
    if not isinstance(text, str):
        return text
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def _split_top_level(item: str) -> list[str]:
    """``"factors=[1,2],x=3"`` -> ``["factors=[1,2]", "x=3"]``: commas inside ``[...]`` or ``{...}``
    belong to one JSON value (a list such as LongRoPE's factors), not to the grid."""
    return _split_outside(item, "--param", "[]{}", "--param factors=[1,2]")


def parse_params(items: list[str] | None) -> dict:
    """``["beta_fast=16,32", "window=2k"]`` -> ``{"beta_fast": [16, 32], "window": "2k"}``.

    A comma list after ``key=`` is a grid of values (one method entry per value); an item
    without ``=`` continues the previous key's list. A bracketed JSON value is one value, commas
    and all: ``factors=[1.0,1.5]``. A key given twice, or a grid listing a value twice, is an error.
    """
    params: dict = {}
    grids: set[str] = set()  # keys whose list is a comma grid, not one JSON list value
    for item in items or []:
        key = None
        for part in _split_top_level(item):
            if "=" not in part or part.lstrip().startswith(("[", "{")):
                if key is None:
                    raise UserError(f"bad --param '{part}'", "write key=value, e.g. --param beta_fast=16")
                params[key] = [*params[key], parse_value(part)] if key in grids else [params[key], parse_value(part)]
                grids.add(key)
                continue
            key, value = part.split("=", 1)
            key = key.strip()
            if not key:
                raise UserError(f"bad --param '{part}': empty key", "write key=value, e.g. --param beta_fast=16")
            if key in params:
                raise UserError(f"--param {key} is given twice", f"give one list instead, e.g. --param {key}=16,32")
            params[key] = parse_value(value.strip())
    for key in grids:
        if len(set(map(repr, params[key]))) != len(params[key]):
            raise UserError(f"--param {key} lists a value twice", "list each value once")
    return params


def len_label(n) -> str:
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


# ---- paths --------------------------------------------------------------------------------------

NAME_MAX = 255  # bytes of one file or folder name (ext4, btrfs, xfs, APFS, NTFS alike)
PATH_MAX = 4096  # bytes of a whole path (Linux)


def expand_path(path: str | os.PathLike) -> Path:
    """A path as the user meant it: ``~`` and ``~user`` expanded. A shell expands ``~`` only at
    the start of a word, so ``--out=~/r.csv``, a quoted ``'~/r.csv'``, a suite's ``out = "~/r.csv"``
    and a Python string all arrive with it; every path ctxbench writes or reads enters here (the
    results files, plot folders, suites)."""
    return Path(os.path.expanduser(os.fspath(path)))


def check_name_lengths(path: str | os.PathLike, what: str, spare: int = 0) -> None:
    """Refuse a path the filesystem cannot hold, before anything touches it: a name longer than
    :data:`NAME_MAX` bytes (``spare``: bytes the last name needs for files made beside it, such as
    a results file's ``.NAME.lock``), or a whole path longer than :data:`PATH_MAX`. Asking the
    filesystem about such a path raises ``File name too long`` from any ``stat``, so this check
    comes first."""
    text = os.fspath(path)
    if len(text.encode()) > PATH_MAX:
        raise UserError(f"{what} is {len(text.encode())} bytes long, more than a path can be ({PATH_MAX})", "choose a shorter path")
    parts = Path(text).parts
    for i, part in enumerate(parts):
        most = NAME_MAX - (spare if i == len(parts) - 1 else 0)
        size = len(part.encode())
        if size > most:
            name = part if len(part) <= 40 else part[:20] + "..." + part[-12:]
            room = f"; {spare} are kept for the files ctxbench makes beside it" if spare and i == len(parts) - 1 else ""
            raise UserError(f"{what}: the name '{name}' is {size} bytes, longer than a file name can be here ({most} bytes{room})",
                            f"choose a name of at most {most} bytes")  # fmt: skip


# ---- text files ---------------------------------------------------------------------------------

_WIDE = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


def wide_encoding(raw: bytes) -> str | None:
    """``"UTF-16"`` or ``"UTF-32"`` when ``raw`` is text in one of them (a byte-order mark, or
    ASCII-range text with a zero byte beside every character, as Windows' Notepad and
    PowerShell's ``>`` save it), else ``None``. Such a file is text, not binary: calling it
    binary sends the user looking for the wrong fault."""
    for mark, name in _WIDE.items():
        if raw.startswith(mark):
            return name
    head = raw[: 4096 - 4096 % 4]

    def zero(start: int, step: int) -> bool:
        part = head[start::step]
        return len(part) >= 4 and part.count(0) > 0.9 * len(part)

    if len(head) < 8:
        return None
    if zero(1, 4) and zero(2, 4) and zero(3, 4):  # without a mark: the order iconv must be told
        return "UTF-32LE"
    if zero(0, 4) and zero(1, 4) and zero(2, 4):
        return "UTF-32BE"
    if zero(1, 2):
        return "UTF-16LE"
    if zero(0, 2):
        return "UTF-16BE"
    return None


def decode_text(raw: bytes, what: str, fix: str = "", keep_bom: bool = False) -> str:
    """``raw`` as UTF-8 text (a byte-order mark dropped), or one :class:`UserError` that names the
    fault as it is: UTF-16/32 text (with the conversion that fixes it), binary data (zero bytes
    that are not wide text), or bytes that are not UTF-8 (with the first bad byte's place).
    ``what`` names the file (``haystack file 'x.txt'``), ``fix`` what to give instead of binary data.
    Every reader of a user's text file (results CSVs, suites, datasets, haystacks, QA data) calls it.
    ``keep_bom``: a UTF-8 byte-order mark stays in the text (where the text is hashed into a digest
    that files already hold)."""
    refuse_wide(raw, what)
    if b"\x00" in raw[:65536]:
        raise UserError(f"{what} is binary, not text", fix or "give a text file")
    try:
        return raw.decode("utf-8" if keep_bom else "utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} is not UTF-8 text (byte {e.start})", "save it as UTF-8, e.g. iconv -t UTF-8 FILE > NEW") from None


def json_rows(text: str) -> list:
    """A JSON document (a list, or one value) or JSON lines (one value a line), parsed; the one
    reader of both for every data file (datasets, BABILong rows, LongBench v2 items). A syntax error
    raises :class:`ValueError` naming the file's own line and column: JSON lines are parsed a line
    at a time, and ``json`` alone would say "line 1" of every one."""
    if text.lstrip().startswith("["):
        return json.loads(text)
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}, column {exc.colno}: {exc.msg}") from None
    return rows


def refuse_wide(raw: bytes, what: str) -> None:
    """One :class:`UserError` when ``raw`` is UTF-16/32 text, with the conversion that fixes it
    (for readers that otherwise tolerate stray bytes, and would read such a file as garbage)."""
    wide = wide_encoding(raw)
    if wide:
        raise UserError(f"{what} is {wide} text, not UTF-8", f"save it as UTF-8, e.g. iconv -f {wide} -t UTF-8 FILE > NEW")


# ---- reading a file that may not be one ---------------------------------------------------------

# How long a stream (a pipe, ``/dev/stdin``, ``<(...)``) may stay silent before the read gives up:
# a writer that has said nothing for this long is not coming (a FIFO opened by name that nobody
# writes reads as empty at once: no writer, no data).
STREAM_STALL_S = 30.0


class NotAFile(OSError):
    """Why a path cannot be read as a file: its message is the reason (``a FIFO (named pipe)``,
    ``a folder``, ``8,589,934,592 bytes, above the ceiling of 16,777,216``, ``a symlink loop``,
    ``not found``, ``a link out of /cache``). ``missing``: nothing is there at all."""

    def __init__(self, reason: str, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` is, for people: ``a folder``, ``a FIFO (named pipe)``, ..."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def short(text: object, most: int = 60) -> str:
    """``text`` as a message shows it: at most ``most`` characters, the middle elided (a 5000-digit
    number is ``12345678901234567890…(5000 characters)…67890``), so one line stays one line."""
    text = str(text)
    if len(text) <= most:
        return text
    keep = max(8, (most - 24) // 2)
    return f"{text[:keep]}…({len(text)} characters)…{text[-keep:]}"


def _open_checked(path, most: int, streams: bool, within) -> tuple[int, os.stat_result, bool]:
    """(fd, fstat, whether regular) of ``path`` opened without blocking, after the checks of
    :func:`read_bounded`; the caller closes ``fd``."""
    path = os.fspath(path)
    if within is not None:
        real, root = os.path.realpath(path), os.path.realpath(within)
        if os.path.commonpath([real, root]) != root:
            raise NotAFile(f"a link to {short(real)}, outside {short(root)}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAFile("a symlink loop") from None
        if exc.errno == errno.ENOENT:
            raise NotAFile("a dangling symlink" if os.path.islink(path) else "not found", missing=not os.path.islink(path)) from None
        if exc.errno == errno.EISDIR:
            raise NotAFile("a folder") from None
        raise NotAFile(f"unreadable: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if not regular and not (streams and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode))):
            raise NotAFile(kind_of(st.st_mode))
        if regular and st.st_size > most:
            raise NotAFile(f"{st.st_size:,} bytes, above the ceiling of {most:,}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st, regular


def regular_size(path: str | os.PathLike, most: int, within: str | os.PathLike | None = None) -> int:
    """The size of ``path`` when it is a regular file of at most ``most`` bytes (inside ``within``),
    else :class:`NotAFile`: for a file another library opens itself (a safetensors cache)."""
    fd, st, _ = _open_checked(path, most, False, within)
    os.close(fd)
    return st.st_size


def read_bounded(path: str | os.PathLike, most: int, streams: bool = False, within: str | os.PathLike | None = None) -> bytes:
    """The bytes of ``path``, never blocking and never more than ``most``, or :class:`NotAFile`
    saying why not. A regular file is checked by ``fstat`` before a byte is read (an 8 GB sparse
    file is refused by its size, not read into memory). With ``streams``, a pipe or character
    device (``/dev/stdin``, ``<(...)``, ``/dev/null``) is read to its end too, up to ``most``, and a
    writer silent for :data:`STREAM_STALL_S` ends the read; otherwise it is refused by kind. With
    ``within`` (a cache folder), a path whose real place is outside that folder is refused (a link
    out of the cache is never followed). Opened ``O_NONBLOCK``: opening a FIFO nobody writes does
    not wait for a writer."""
    fd, st, _ = _open_checked(path, most, streams, within)
    try:
        chunks, size = [], 0
        while size <= most:
            try:
                chunk = os.read(fd, min(1 << 20, most + 1 - size))
            except BlockingIOError:  # a pipe whose writer has not written yet
                if not select.select([fd], [], [], STREAM_STALL_S)[0]:
                    raise NotAFile(f"{kind_of(st.st_mode)} that stayed silent for {STREAM_STALL_S:.0f} s") from None
                continue
            except OSError as exc:
                raise NotAFile(f"unreadable: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > most:
            raise NotAFile(f"{kind_of(st.st_mode)} of more than {most:,} bytes, the ceiling")
        return b"".join(chunks)
    finally:
        os.close(fd)
