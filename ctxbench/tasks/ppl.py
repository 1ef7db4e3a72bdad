"""Perplexity at each length (DESIGN.md "Tasks: protocols").

Truncate mode (stride = length, the YaRN paper's ``--truncate``): each selected document's first
``n`` tokens form one window; every token but the first is scored. Sliding mode (stride < n):
the whole document is scored with windows of ``n`` tokens advancing by the stride, every token
once, with all the context its window gives it. Both weight by token.

Documents for length ``n``: the first ``docs`` documents of the corpus with at least ``n``
tokens; shorter ones are skipped for that length and counted.

Speed: for methods whose frequencies do not depend on the sequence length, a causal model's
loss on token ``t`` is the same in every window that starts at 0 and contains ``t``, so in
truncate mode one forward per document, at the longest length it is selected for, gives the
loss at every shorter length too.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..data import Tokenized, load_corpus
from ..errors import UserError
from ..measure import Measured
from ..methods import MethodSetting
from ..models import LoadedModel
from ..patching import applied
from ..scoring import sliding_nll, token_nll
from .base import Cell, Measurement

NAME = "ppl"


@dataclass
class Settings:
    methods: list[MethodSetting]
    factors: list[float]
    lengths: list[int] | None = None  # None: L/2, L, 2L, 4L capped by the documents
    stride: int | None = None  # None: stride = length (truncate mode)
    dataset: str | None = None
    split: str = "test"
    text_column: str = "text"
    docs: int = 4
    chunk: int = 1024  # positions per LM-head chunk


@dataclass
class Context:
    dataset: str
    data_digest: str
    tokens: Tokenized
    lengths: list[int]
    chosen: dict[int, list[int]]  # length -> document indices
    skipped: dict[int, int]  # length -> shorter documents passed over
    notes: list[str]
    corpus_digest: str = ""


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 2, trained_len, 2 * trained_len, 4 * trained_len]


def check_settings(settings: Settings) -> None:
    if settings.docs < 1:
        raise UserError(f"--docs {settings.docs} must be >= 1", "pass e.g. --docs 4")
    if settings.stride is not None and settings.stride < 1:
        raise UserError(f"--stride {settings.stride} must be >= 1", "omit it (stride = length) or pass e.g. --stride 1k")
    for n in settings.lengths or []:
        if n < 2:
            raise UserError(f"length {n} is too short to score", "use lengths of at least 2 tokens, e.g. 4k")
        if settings.stride is not None and settings.stride > n:
            raise UserError(
                f"--stride {settings.stride} is longer than length {n}: tokens between windows would never be scored",
                f"use a stride <= {n}, or omit --stride",
            )


def prepare(lm: LoadedModel, settings: Settings) -> Context:
    """Load and tokenise the corpus, pick documents per length; error if none is long enough."""
    check_settings(settings)
    corpus = load_corpus(settings.dataset, settings.split, settings.text_column)
    tokens = Tokenized(corpus, lm.tokenizer)
    asked = settings.lengths or default_lengths(lm.geometry.trained_len)
    chosen = tokens.select(asked, settings.docs)
    notes = []
    longest = max((len(tokens[i]) for i in tokens.ids), default=0)
    lengths = [n for n in asked if chosen[n]]
    if not lengths:
        raise UserError(
            f"every document of '{corpus.name}' is shorter than every length asked ({', '.join(map(str, asked))} tokens; longest has {longest})",
            "use shorter --len, or a dataset with longer documents",
        )
    for n in asked:
        if not chosen[n]:
            notes.append(f"length {n}: no document has {n} tokens (longest: {longest}); skipped")
        elif len(chosen[n]) < settings.docs:
            notes.append(f"length {n}: only {len(chosen[n])} of {settings.docs} documents are long enough")
    skipped = {}
    for n in lengths:
        last = chosen[n][-1]
        skipped[n] = sum(1 for i in range(last + 1) if len(tokens[i]) < n)
    # The digest covers the corpus and which of its documents are scored, so changing --docs
    # (or the lengths, which change the selection) makes new cells rather than resuming old ones.
    picked = sorted({i for n in lengths for i in chosen[n]})
    digest = hashlib.sha256((corpus.digest + "|" + "|".join(corpus.names[i] for i in picked)).encode()).hexdigest()[:16]
    return Context(corpus.name, "sha256:" + digest, tokens, lengths, chosen, skipped, notes, corpus.digest)


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    lengths = ctx.lengths
    return [
        Cell(NAME, m, f, n, stride=settings.stride if settings.stride is not None else n)
        for m in settings.methods
        for f in settings.factors
        for n in lengths
    ]


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    """Cells computed together: in truncate mode all lengths of one (method, factor) whose
    frequencies do not depend on length share forwards; everything else runs alone."""
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        shared = cell.stride == cell.length and not cell.method.dynamic
        key = (cell.method, cell.factor) if shared else (cell.method, cell.factor, cell.length)
        out.setdefault(key, []).append(cell)
    return list(out.values())


def _summary(cell: Cell, docs: list[tuple[str, torch.Tensor]], seconds: float, pass_tokens: int, peak: float, mode: str, extra: dict) -> list[Measurement]:
    rows: list[Measurement] = []
    total, count = 0.0, 0
    for name, nll in docs:
        s, c = float(nll.double().sum()), int(nll.numel())
        total, count = total + s, count + c
        rows.append(Measurement("nll", s / c, doc=name, tokens=c, mode=mode))
        rows.append(Measurement("ppl", math.exp(s / c), doc=name, tokens=c, mode=mode))
    mean = total / count
    agg = dict(doc="all", tokens=count, seconds=round(seconds, 4), mode=mode, extra=extra)
    rows.append(Measurement("nll", mean, **agg))
    rows.append(Measurement("ppl", math.exp(mean), **agg))
    rows.append(Measurement("docs", len(docs), **agg))
    rows.append(Measurement("tokens_per_s", pass_tokens / seconds if seconds > 0 else float("nan"), **agg))
    rows.append(Measurement("peak_mem_mb", round(peak, 1), **agg))
    return rows


def run_group(lm: LoadedModel, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    """Score the documents of each cell of ``group``; yields each cell's measurements."""
    model, geom = lm.model, lm.geometry
    first = group[0]
    if len(group) > 1 or (first.stride == first.length and not first.method.dynamic):
        yield from _shared_pass(lm, ctx, group, settings)
        return
    cell = first
    docs, seconds, peak, pass_tokens = [], 0.0, 0.0, 0
    sliding = cell.stride < cell.length
    with applied(model, geom, cell.method, cell.factor, cell.length):
        for i in ctx.chosen[cell.length]:
            ids = ctx.tokens[i] if sliding else ctx.tokens[i][: cell.length]
            with Measured(lm.device) as m:
                if sliding:
                    nll = sliding_nll(model, ids, cell.length, cell.stride, settings.chunk)
                else:
                    nll = token_nll(model, ids, chunk=settings.chunk)
            docs.append((ctx.tokens.corpus.names[i], nll))
            seconds, peak, pass_tokens = seconds + m.seconds, max(peak, m.peak_mb), pass_tokens + len(ids)
    mode = "sliding" if sliding else "truncate"
    extra = {"skipped_docs": ctx.skipped[cell.length], "corpus_digest": ctx.corpus_digest}
    yield cell, _summary(cell, docs, seconds, pass_tokens, peak, mode, extra)


def _shared_pass(lm: LoadedModel, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    """One forward per document at the longest length it is selected for; shorter lengths
    read the prefix of its per-token losses."""
    model, geom = lm.model, lm.geometry
    lengths = sorted(c.length for c in group)
    need: dict[int, int] = {}  # doc -> longest length it serves in this group
    for n in lengths:
        for i in ctx.chosen[n]:
            need[i] = max(need.get(i, 0), n)
    losses: dict[int, torch.Tensor] = {}
    cost: dict[int, tuple[float, float, int]] = {}  # doc -> (seconds, peak MB, tokens)
    top = max(lengths)
    cell0 = group[0]
    with applied(model, geom, cell0.method, cell0.factor, top):
        for i, n in sorted(need.items()):
            with Measured(lm.device) as m:
                losses[i] = token_nll(model, ctx.tokens[i][:n], chunk=settings.chunk)
            cost[i] = (m.seconds, m.peak_mb, n)
    for cell in sorted(group, key=lambda c: c.length):
        n = cell.length
        docs = [(ctx.tokens.corpus.names[i], losses[i][: n - 1]) for i in ctx.chosen[n]]
        seconds = sum(cost[i][0] for i in ctx.chosen[n])
        peak = max(cost[i][1] for i in ctx.chosen[n])
        pass_tokens = sum(cost[i][2] for i in ctx.chosen[n])
        extra = {"skipped_docs": ctx.skipped[n], "pass_lengths": sorted({need[i] for i in ctx.chosen[n]}), "corpus_digest": ctx.corpus_digest}
        yield cell, _summary(cell, docs, seconds, pass_tokens, peak, "truncate", extra)
