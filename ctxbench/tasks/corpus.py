"""Documents to score: the built-in offline corpus, local files, or a HF dataset; tokenised once.

The built-in corpus (``stdlib``) is the ``.py`` files of the running interpreter's standard
library — no site-packages, no test folders — one document per file in path order: long, real
text that is on every machine. Its digest goes on every row, so numbers from different Python
versions are never mixed up.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbench.errors import UserError
from ctxbench.model.cache import BadEntry, Schema, cache_root, digest, discard, ignored, write_atomic
from ctxbench.parsing import NotAFile, decode_text, json_rows, refuse_wide, regular_size, short

if TYPE_CHECKING:
    import torch

BUILTIN = "stdlib"
# Short names for the long-document sets the YaRN / LongRoPE evaluations use: (hub id, split, text column).
HUB_ALIASES = {
    "pg19": ("emozilla/pg19-test", "test", "text"),
    "proof-pile": ("hoskinson-center/proof-pile", "test", "text"),
    "govreport": ("ccdv/govreport-summarization", "test", "report"),
}
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
LOCAL_SUFFIXES = (".txt", ".md", ".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class Corpus:
    """Named documents and a digest of their exact text."""

    name: str
    digest: str
    names: tuple[str, ...]
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)


def _digest(names, texts) -> str:
    h = hashlib.sha256()
    for name, text in zip(names, texts, strict=True):
        h.update(name.encode() + b"\0" + text.encode("utf-8", "surrogatepass") + b"\0")
    return "sha256:" + h.hexdigest()[:16]


def _corpus(name: str, names: list[str], texts: list[str]) -> Corpus:
    kept = [(n, t) for n, t in zip(names, texts, strict=True) if t and t.strip()]
    if not kept:
        raise UserError(f"dataset '{name}' has no non-empty documents", "point --dataset at files with text in them")
    names2, texts2 = zip(*kept, strict=True)
    return Corpus(name=name, digest=_digest(names2, texts2), names=tuple(names2), texts=tuple(texts2))


def stdlib_corpus() -> Corpus:
    """The interpreter's standard-library ``.py`` files, in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    names = [p.relative_to(root).as_posix() for p in files]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    return _corpus(BUILTIN, names, texts)


def _records_texts(path: Path, records: list[dict], text_column: str) -> list[str]:
    if not records:
        return []
    if text_column not in records[0]:
        cols = ", ".join(list(records[0])[:10])
        raise UserError(f"'{path}' has no text column '{text_column}' (columns: {cols})", "pass --text-column NAME")
    return [str(r.get(text_column) or "") for r in records]


def _read_local(path: Path, text_column: str) -> tuple[list[str], list[str]]:
    raw = path.read_bytes() if path.suffix in (".txt", ".md", ".jsonl", ".json") else b""
    refuse_wide(raw, f"dataset file '{path}'")  # UTF-16 read with errors="replace" would be scored as garbage
    if path.suffix in (".txt", ".md"):
        return [path.name], [raw.decode("utf-8", errors="replace")]
    if path.suffix in (".jsonl", ".json"):
        text = decode_text(raw, f"dataset file '{path}'", "give UTF-8 JSON lines")
        try:
            records = json_rows(text)
        except ValueError as exc:
            raise UserError(f"'{path}' is not valid JSON or JSON lines ({exc})", "write one JSON object per line") from None
        if isinstance(records, dict):
            records = [records]
        if records and not isinstance(records[0], dict):
            raise UserError(f"'{path}' lines are not JSON objects", f"write one object per line with a '{text_column}' field")
        texts = _records_texts(path, records, text_column)
        return [f"{path.name}:{i}" for i in range(len(texts))], texts
    if path.suffix == ".parquet":
        import pandas as pd  # start-up: pandas only where it runs

        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow's ArrowInvalid / OSError for a damaged or cut-short file
            raise UserError(f"dataset file '{path}' is not a readable Parquet file ({short(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 120)})",
                            "copy it again (compare its size with the source), or convert the data to .jsonl") from None  # fmt: skip
        if text_column not in frame.columns:
            raise UserError(
                f"'{path}' has no text column '{text_column}' (columns: {', '.join(map(str, frame.columns[:10]))})",
                "pass --text-column NAME",
            )
        texts = [str(t) for t in frame[text_column].fillna("")]
        return [f"{path.name}:{i}" for i in range(len(texts))], texts
    raise UserError(f"cannot read '{path}': unknown file type", f"use one of {', '.join(LOCAL_SUFFIXES)}")


def load_corpus(dataset: str | None = None, split: str = "test", text_column: str = "text") -> Corpus:
    """``None``/``stdlib`` -> built-in corpus; a local file or directory; else a HF dataset name."""
    if dataset in (None, "", BUILTIN):
        return stdlib_corpus()
    path = Path(dataset).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)
        if not files:
            raise UserError(f"directory '{dataset}' has no {'/'.join(LOCAL_SUFFIXES)} files", "point --dataset at a folder of documents")
        names, texts = [], []
        for f in files:
            n, t = _read_local(f, text_column)
            names += [str(f.relative_to(path)) if len(n) == 1 else x for x in n]
            texts += t
        return _corpus(str(dataset), names, texts)
    if path.is_file():
        names, texts = _read_local(path, text_column)
        if not texts or not any(t.strip() for t in texts):
            raise UserError(f"dataset file '{dataset}' is empty", "give a file with at least one document")
        return _corpus(str(dataset), names, texts)
    if path.suffix in LOCAL_SUFFIXES or dataset.startswith((".", "/", "~")):
        raise UserError(f"dataset file '{dataset}' not found", "check the path, or omit --dataset for the built-in corpus")
    return _hub_corpus(dataset, split, text_column)


def is_local_dataset(dataset: str | None) -> bool:
    """Whether ``dataset`` is read from this machine (the built-in corpus, a file or a folder), not a hub."""
    if dataset in (None, "", BUILTIN):
        return True
    if dataset in HUB_ALIASES:
        return False
    path = Path(dataset).expanduser()
    return path.exists() or path.suffix in LOCAL_SUFFIXES or dataset.startswith((".", "/", "~"))


def check_local_dataset(dataset: str | None, text_column: str = "text") -> None:
    """Raise the same errors as :func:`load_corpus` for a local dataset, without a model loaded."""
    if dataset not in (None, "", BUILTIN) and is_local_dataset(dataset):
        load_corpus(dataset, text_column=text_column)


def _hub_corpus(name: str, split: str, text_column: str) -> Corpus:
    hub_id, alias_split, alias_column = HUB_ALIASES.get(name, (name, split, text_column))
    if name in HUB_ALIASES and text_column == "text":
        text_column = alias_column
    try:
        import datasets  # optional: datasets only where it is used

        data = datasets.load_dataset(hub_id, split=alias_split if name in HUB_ALIASES else split)
    except Exception as exc:  # datasets raises many types for "not found / offline"
        raise UserError(
            f"cannot load dataset '{name}' ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})",
            "check the name and network (or HF_HUB_OFFLINE), give a local .txt/.jsonl/.parquet, or omit --dataset for the built-in corpus",
        ) from None
    if text_column not in data.column_names:
        raise UserError(f"dataset '{name}' has no text column '{text_column}' (columns: {', '.join(data.column_names)})", "pass --text-column NAME")
    texts = [str(t or "") for t in data[text_column]]
    return _corpus(f"{name}", [f"{name}:{i}" for i in range(len(texts))], texts)


def tokenizer_digest(tokenizer) -> str:
    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    h.update((backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)).encode())
    h.update(repr(tokenizer("a").input_ids).encode())  # special tokens added by default
    return h.hexdigest()[:16]


# The token cache: one safetensors file per (tokenizer, corpus), a tensor per document tokenised so
# far, and in its metadata the schema stamp and, per document, a digest of the tokenizer, the
# document's name and text, and its ids. Version 2 (safetensors, digests) replaced the unverified
# torch.save file (``<key>.pt``), whose wrong ids scored as ``ok`` under the corpus's own digest.
TOKENS_SCHEMA = Schema("corpus tokens", 2)
# The largest token cache file: int32 ids of a billion-token corpus (4 GB). Past that it is no cache of
# ours (an 8 GB sparse file): refused by its size before a byte is read.
TOKENS_MOST = 4 << 30


class Tokenized:
    """Token ids of a corpus, produced on demand in document order and cached on disk.

    ``bos``: ``auto`` keeps the tokenizer's default (SmolLM2 adds no BOS), ``on`` puts the
    tokenizer's BOS token before every document (what the YaRN evaluation's ``perplexity.py``
    does whenever the tokenizer has one), ``off`` removes a BOS the tokenizer adds. The first
    token of a document is context only.

    Cached ids are used only when their digest binds them to this tokenizer and this document's
    text; any other entry is noted on stderr, tokenised again and the file rewritten.
    """

    def __init__(self, corpus: Corpus, tokenizer, cache_dir: str | Path | None = None, bos: str = "auto") -> None:
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.bos = bos
        self.bos_id = getattr(tokenizer, "bos_token_id", None)
        if bos == "on" and self.bos_id is None:
            raise UserError("--bos on: this tokenizer has no BOS token", "use --bos auto or --bos off")
        root = Path(cache_dir).expanduser() if cache_dir else cache_root()
        self.tokenizer_digest = tokenizer_digest(tokenizer)
        self.cache_path = root / "tokens" / f"{self.tokenizer_digest}-{corpus.digest.split(':')[-1]}.safetensors"
        self.ids: dict[int, torch.Tensor] = {}  # verified or tokenised here; torch is imported on first use
        self._dirty = False
        self._load()

    def _entry_digest(self, index: int, ids) -> str:
        """What a stored document's ids must carry: a digest of the tokenizer, the document's name
        and text, and the ids themselves."""
        return digest(self.tokenizer_digest.encode(), self.corpus.names[index].encode("utf-8", "surrogatepass"),
                      self.corpus.texts[index].encode("utf-8", "surrogatepass"), ids.numpy().tobytes())  # fmt: skip

    def _problem(self, name: str, ids, expected: object) -> str | None:
        """Why the stored tensor ``name`` cannot be a document's ids here (None: it can)."""
        import torch  # start-up: torch only where it runs

        index = int(name[3:]) if name.startswith("doc") and name[3:].isdigit() else -1
        if not 0 <= index < len(self.corpus):
            return "not a document of this corpus"
        if ids.dtype != torch.int32 or ids.dim() != 1:
            return f"{ids.dtype} of shape {tuple(ids.shape)}, not int32 ids"
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(self.tokenizer)):
            return "ids outside the tokenizer's vocabulary"
        if expected != self._entry_digest(index, ids):
            return "its ids are not this tokenizer's for this document's text (digest mismatch)"
        return None

    def _load(self) -> None:
        """The verified documents of the cache file: a file that is unreadable, truncated, of
        another schema or for another tokenizer or corpus is noted and removed; each document whose
        ids do not verify is left out (and tokenised again), with one note for the file."""
        from safetensors import SafetensorError, safe_open  # optional: safetensors only where it is used

        path = self.cache_path
        if not path.exists() and not path.is_symlink():
            return
        try:
            try:  # a regular file under the ceiling, inside the cache: a FIFO would hang safe_open, /dev/zero fill memory
                regular_size(path, TOKENS_MOST, within=path.parent.parent)
            except NotAFile as exc:
                raise BadEntry(f"{exc.reason}, not a token cache file") from None
            with safe_open(str(path), "pt") as f:
                try:
                    stamp = json.loads((f.metadata() or {}).get("ctxbench", "null"))
                except ValueError:
                    raise BadEntry("its metadata is not JSON") from None
                TOKENS_SCHEMA.check(stamp)
                if stamp.get("tokenizer") != self.tokenizer_digest or stamp.get("corpus") != self.corpus.digest:
                    raise BadEntry("written for another tokenizer or corpus")
                docs = stamp.get("docs")
                if not isinstance(docs, dict):
                    raise BadEntry("its metadata has no table of document digests")
                stored = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118  (safe_open has no iterator)
        except (BadEntry, SafetensorError, OSError) as why:
            ignored(path, why if isinstance(why, BadEntry) else f"unreadable or truncated: {why}")
            discard(path)
            return
        bad = [f"{name}: missing" for name in docs if name not in stored]
        for name, ids in stored.items():
            problem = self._problem(name, ids, docs.get(name))
            if problem:
                bad.append(f"{name}: {problem}")
            else:
                self.ids[int(name[3:])] = ids
        if bad:
            ignored(path, f"{len(bad)} bad document(s), e.g. {bad[0]}", "tokenised again")
            self._dirty = True  # rewritten without them on the next save

    def __getitem__(self, index: int) -> torch.Tensor:
        import torch  # start-up: torch only where it runs

        if index not in self.ids:
            ids = self.tokenizer(self.corpus.texts[index], return_attention_mask=False)["input_ids"]
            self.ids[index] = torch.tensor(ids, dtype=torch.int32)
            self._dirty = True
        ids = self.ids[index]  # (n,) with the tokenizer's default special tokens
        has_bos = self.bos_id is not None and len(ids) > 0 and int(ids[0]) == self.bos_id
        if self.bos == "on" and not has_bos:
            return torch.cat([torch.tensor([self.bos_id], dtype=ids.dtype), ids])
        if self.bos == "off" and has_bos:
            return ids[1:]
        return ids

    def __len__(self) -> int:
        return len(self.corpus)

    def select(self, lengths: list[int], docs: int) -> dict[int, list[int]]:
        """The first ``docs`` documents with at least ``max(lengths)`` tokens, for every length.

        The same documents at every length (as in the YaRN paper's evaluation) keep the curve
        over lengths comparable; lengths no document reaches are dropped first (empty list).
        """
        longest = 0
        picked: list[int] = []
        reach = {n: False for n in lengths}
        for i in range(len(self)):
            size = len(self[i])
            longest = max(longest, size)
            for n in lengths:
                reach[n] = reach[n] or size >= n
            if all(reach.values()) and len(picked) >= docs:
                break
            if all(size >= n for n in lengths) and len(picked) < docs:
                picked.append(i)
        self.save()
        top = max((n for n in lengths if reach[n]), default=None)
        if top is None:
            return {n: [] for n in lengths}
        if top != max(lengths):  # the longest lengths are out of reach: pick for the longest reachable
            picked = [i for i in range(len(self)) if i in self.ids and len(self[i]) >= top][:docs]
        return {n: (picked if reach[n] else []) for n in lengths}

    def save(self) -> None:
        """Write the ids tokenised so far, each with its digest (atomically; a failure only costs
        the next run the tokenising)."""
        from safetensors.torch import save  # optional: safetensors only where it is used

        if not self._dirty:
            return
        tensors = {f"doc{i}": ids.contiguous() for i, ids in sorted(self.ids.items())}
        stamp = {**TOKENS_SCHEMA.stamp(), "tokenizer": self.tokenizer_digest, "corpus": self.corpus.digest,
                 "docs": {f"doc{i}": self._entry_digest(i, ids) for i, ids in sorted(self.ids.items())}}  # fmt: skip
        if write_atomic(self.cache_path, save(tensors, metadata={"ctxbench": json.dumps(stamp)})):
            self._dirty = False
