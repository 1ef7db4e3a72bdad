"""Perplexity at each length.

Truncate mode (stride = length, the YaRN paper's ``--truncate``): each selected document's first
``n`` tokens form one window; every token but the first is scored. Sliding mode (stride < n):
the whole document is scored with windows of ``n`` tokens advancing by the stride, every token
once, with all the context its window gives it. Both weight by token.

Documents for length ``n``: the first ``docs`` documents of the corpus with at least ``n``
tokens; shorter ones are skipped for that length and counted.

Speed: for methods whose frequencies do not depend on the sequence length, a causal model's
loss on token ``t`` is the same in every window that starts at 0 and contains ``t``, so in
truncate mode one forward per document, at the longest length it is selected for, gives the
loss at every shorter length too. A method that is not causal (``ms-poe``: its head order comes
from the window's last token) runs one forward per length.

Rows per cell: per document and aggregate (``doc = all``) ``nll`` and ``ppl``; the aggregate's
95% interval ``ppl_lo``/``ppl_hi`` (bootstrap over documents, or over blocks of tokens for one
document: ``extra.interval`` says which); ``docs``, ``tokens_per_s``, ``peak_mem_mb``; loss by
position (``nll_pos``, one row per bucket of :data:`BUCKET` target positions aligned to multiples
of 512, its ``[pos_start, pos_end)`` in their own columns); and for lengths past the trained length ``nll_beyond_L``
(mean NLL of target positions >= L). All come from the losses already computed: no extra
forward, in the shared pass too.

``--metrics longppl,kl`` adds proxy metrics (:mod:`ctxbench.tasks.proxy`): LongPPL over the key
tokens the unscaled model finds once per document, and the KL divergence from the unscaled
model's next-token distribution inside the trained length, from hidden states it computes once
per document. Both need truncate mode (no ``--stride``).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ctxbench.errors import UserError
from ctxbench.parsing import len_label, parse_length
from ctxbench.stats import beyond_mean, bucket_means, ppl_interval
from ctxbench.tasks import proxy
from ctxbench.tasks.base import (
    AMOUNT,
    COUNT,
    NLL,
    PERPLEXITY,
    Cell,
    Context,
    CostItem,
    Measurement,
    Option,
    Task,
)
from ctxbench.tasks.common import factors_for, parse_choice, parse_positive_int
from ctxbench.tasks.corpus import Tokenized, check_local_dataset, load_corpus
from ctxbench.tasks.options import text_parser
from ctxbench.tasks.plots import (
    by_factor,
    extra_of,
    factor_of,
    legend,
    mark_trained,
    ok_rows,
    pyplot,
    safe_name,
    save,
    series_style,
)

if TYPE_CHECKING:
    from pathlib import Path

NAME = "ppl"
BUCKET = 512  # target positions per loss-by-position bucket


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/2, L, 2L, 4L capped by the documents
    stride: int | None = None  # None: stride = length (truncate mode)
    dataset: str | None = None
    split: str = "test"
    text_column: str = "text"
    docs: int = 4
    bos: str = "auto"
    metrics: tuple[str, ...] = ()  # proxy metrics beyond ppl: longppl, kl (ctxbench.tasks.proxy)
    chunk: int = 1024  # positions per LM-head chunk


# Identity: the stride is a cell column of its own; which documents are scored (dataset, split,
# column, --docs) and the BOS choice are hashed into the data digest by prepare(), which is part of
# the cell key, so none of them is folded in a second time (and files from before the options
# column keep resuming).
MOST_DOCS = 10_000  # documents per length: PG19's test split has 100 books, GovReport's 973 reports
OPTIONS = (
    Option("stride", "window stride (default = length: one window per document)", lambda v: parse_length(v, "--stride"), identity=False),
    Option("dataset", "HF dataset (pg19, proof-pile, govreport, ...), local file/dir; default: built-in stdlib corpus",
           text_parser("--dataset", 'dataset = "docs.jsonl"'), identity=False),
    Option("split", "dataset split (default test)", str, identity=False),
    Option("text_column", "column holding the text (default text)", str, identity=False),
    Option("docs", "documents per length, the first ones long enough (default 4)", lambda v: parse_positive_int(v, "--docs", MOST_DOCS, "more than any long-document corpus holds"), identity=False),
    Option("bos", "auto (the tokenizer's default) | on (BOS before every document, as the YaRN eval) | off",
           lambda v: parse_choice(v, "--bos", ("auto", "on", "off")), identity=False),  # fmt: skip
    proxy.metrics_option(proxy.PPL_METRICS, "longppl = perplexity over LongPPL's key tokens (Fang et al. 2025), kl = KL "
                         "divergence from the unscaled model inside the trained length (llama.cpp's --kl-divergence)"),
)


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 2, trained_len, 2 * trained_len, 4 * trained_len]


def validate(settings: Settings) -> None:
    if settings.docs < 1:
        raise UserError(f"--docs {settings.docs} must be >= 1", "pass e.g. --docs 4")
    if settings.metrics and settings.stride is not None:
        raise UserError(f"--metrics {','.join(settings.metrics)} scores truncate-mode windows, and --stride {settings.stride} slides them",
                        "drop --stride, or run the proxy metrics in a run of their own")  # fmt: skip
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

    check_local_dataset(settings.dataset, settings.text_column)  # fail before the model loads


@dataclass
class State:
    tokens: Tokenized
    lengths: list[int]
    chosen: dict[int, list[int]]  # length -> document indices
    skipped: dict[int, int]  # length -> shorter documents passed over
    corpus_digest: str
    reference: proxy.Reference = field(default_factory=proxy.Reference)  # the unscaled model's, for --metrics

    def longest(self, i: int) -> int:
        """The longest length document ``i`` is scored at in this run (its proxy references cover it)."""
        return max(n for n in self.lengths if i in self.chosen[n])


def prepare(lm, settings: Settings) -> Context:
    """Load and tokenise the corpus, pick documents per length; error if none is long enough."""
    corpus = load_corpus(settings.dataset, settings.split, settings.text_column)
    tokens = Tokenized(corpus, lm.tokenizer, bos=settings.bos)
    asked = list(settings.lengths or default_lengths(lm.geometry.trained_len))
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
    # The digest covers the corpus, which of its documents are scored and the BOS choice, so
    # changing --docs, the lengths or --bos makes new cells rather than resuming old ones.
    # (--bos auto keeps the digest it had before the option existed.)
    picked = sorted({i for n in lengths for i in chosen[n]})
    text = corpus.digest + "|" + "|".join(corpus.names[i] for i in picked) + ("" if settings.bos == "auto" else f"|bos={settings.bos}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    state = State(tokens, lengths, chosen, skipped, corpus.digest)
    return Context(corpus.name, "sha256:" + digest, notes, state)


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    return [
        Cell(NAME, m, f, n, stride=settings.stride if settings.stride is not None else n)
        for m in settings.methods
        for f in factors_for(m, settings.factors)
        for n in ctx.state.lengths
    ]


def _shared(cell: Cell) -> bool:
    return cell.stride == cell.length and not cell.method.dynamic and cell.method.causal


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    """Cells computed together: in truncate mode all lengths of one (method, factor) whose
    frequencies do not depend on length share forwards; everything else runs alone."""
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        key = (cell.method, cell.factor) if _shared(cell) else (cell.method, cell.factor, cell.length)
        out.setdefault(key, []).append(cell)
    return list(out.values())


def cost(settings: Settings, trained_len: int) -> list[CostItem]:
    lengths = list(settings.lengths or default_lengths(trained_len))
    items = []
    for m in settings.methods:
        for f in factors_for(m, settings.factors):
            # each forward stated once with how many times it runs (CostItem.counts): O(cells), not O(docs)
            if m.dynamic or not m.causal or settings.stride is not None:
                forwards, times = tuple(lengths), settings.docs
                if settings.stride is not None:  # a window per stride over documents of about the longest length
                    times = settings.docs * max(1, math.ceil(max(lengths) / settings.stride))
            else:  # one forward per document at the longest length
                forwards, times = (max(lengths),), settings.docs
            items.append(CostItem(cells=len(lengths), forwards=forwards, counts=(times,) * len(forwards),
                                  what=f"{m.label} x{f:g}" if f else m.label, path=m.attention_path))  # fmt: skip
    if settings.metrics:  # the unscaled model's references, once per document of about the longest length
        windows = Counter(proxy.evaluator_forwards(max(lengths), trained_len, settings.metrics))
        items.append(CostItem(cells=0, forwards=tuple(windows), counts=tuple(k * settings.docs for k in windows.values()),
                              what=f"unscaled references ({','.join(settings.metrics)})"))  # fmt: skip
    return items


def _position_rows(arrays: list, trained_len: int, mode: str) -> list[Measurement]:
    """Mean NLL per bucket of :data:`BUCKET` target positions (token-weighted over documents) and
    the mean NLL beyond the trained length (:mod:`ctxbench.stats`)."""
    rows = [
        Measurement("nll_pos", b["nll"], doc="all", tokens=b["tokens"], mode=mode, pos=(b["start"], b["end"]))
        for b in bucket_means(arrays, BUCKET)
    ]
    beyond = beyond_mean(arrays, trained_len)
    if beyond is not None:
        tokens = sum(max(0, len(a) - trained_len + 1) for a in arrays)
        rows.append(Measurement("nll_beyond_L", beyond, doc="all", tokens=tokens, mode=mode, pos=(trained_len, None)))
    return rows


def _summary(docs: list, seconds: float, pass_tokens: int, peak: float, mode: str, extra: dict, trained_len: int) -> list[Measurement]:
    rows: list[Measurement] = []
    total, count = 0.0, 0
    for name, nll in docs:
        s, c = float(nll.double().sum()), int(nll.numel())
        total, count = total + s, count + c
        rows.append(Measurement("nll", s / c, doc=name, tokens=c, mode=mode))
        rows.append(Measurement("ppl", math.exp(s / c), doc=name, tokens=c, mode=mode))
    mean = total / count

    arrays = [nll.double().numpy() for _, nll in docs]
    lo, hi, how = ppl_interval(arrays)
    agg: dict[str, Any] = dict(doc="all", tokens=count, seconds=round(seconds, 4), mode=mode, extra=extra)
    rows.append(Measurement("nll", mean, **agg))
    rows.append(Measurement("ppl", math.exp(mean), **agg))
    ci: dict[str, Any] = dict(doc="all", tokens=count, mode=mode, extra={"interval": f"95% bootstrap over {how}"})
    rows.append(Measurement("ppl_lo", lo, **ci))
    rows.append(Measurement("ppl_hi", hi, **ci))
    rows.append(Measurement("docs", len(docs), **agg))
    rows.append(Measurement("tokens_per_s", pass_tokens / seconds if seconds > 0 else float("nan"), **agg))
    rows.append(Measurement("peak_mem_mb", round(peak, 1), **agg))
    if mode == "truncate":
        rows += _position_rows(arrays, trained_len, mode)
    return rows


def run_group(lm, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    """Score the documents of each cell of ``group``; yields each cell's measurements."""
    from ctxbench.model.measure import Measured  # start-up: loads torch

    st: State = ctx.state
    if settings.metrics:  # the unscaled model's references, once per document for the whole grid
        doc_ids = sorted({i for c in group for i in st.chosen[c.length]})
        st.reference.ensure(lm, {i: st.tokens[i][: st.longest(i)] for i in doc_ids}, settings.metrics, settings.chunk)
    if len(group) > 1 or _shared(group[0]):
        yield from _shared_pass(lm, st, group, settings)
        return
    cell = group[0]
    docs, seconds, peak, pass_tokens, kls = [], 0.0, 0.0, 0, {}
    assert cell.stride is not None  # (every ppl cell has its stride)
    sliding = cell.stride < cell.length
    with lm.session(cell.method, cell.factor or 1.0, cell.length) as engine:
        for i in st.chosen[cell.length]:
            ids = st.tokens[i] if sliding else st.tokens[i][: cell.length]
            with Measured(lm.device) as m:
                if sliding:
                    nll = engine.sliding_nll(ids, cell.length, cell.stride, settings.chunk)
                else:
                    nll, hidden = _window(lm, engine, ids, settings)
            if not sliding and "kl" in settings.metrics:
                kls[i] = _kl(lm, engine, st, i, hidden, settings)
            hidden = None
            docs.append((st.tokens.corpus.names[i], nll))
            seconds, peak, pass_tokens = seconds + m.seconds, max(peak, m.peak_mb), pass_tokens + len(ids)
    mode = "sliding" if sliding else "truncate"
    extra = {"skipped_docs": st.skipped[cell.length], "corpus_digest": st.corpus_digest, "bos": settings.bos}
    rows = _summary(docs, seconds, pass_tokens, peak, mode, extra, lm.geometry.trained_len)
    yield cell, rows + _proxy_rows(st, settings, cell.length, st.chosen[cell.length], docs, kls, mode, lm.geometry.trained_len)


def _window(lm, engine, ids, settings: Settings):
    """(per-token NLL (n-1,), final hidden states (1, n, hidden) or None) of one truncate-mode window
    on ``engine`` (a :class:`ctxbench.backends.base.Session`); the hidden states are kept only when
    ``kl`` needs them, which only the transformers backend computes (the others refuse ``kl``)."""
    if "kl" not in settings.metrics:
        return engine.token_nll(ids, chunk=settings.chunk), None
    hidden = engine.hidden(ids)  # (1, n, hidden)
    return engine.nll_from_hidden(hidden, ids, chunk=settings.chunk), hidden


def _kl(lm, engine, st: State, i: int, hidden, settings: Settings) -> tuple:
    """(KL (m,), same top token (m,), seconds) of a method's window of document ``i`` against the
    unscaled model's hidden states, at positions ``0 .. m-1`` with ``m = min(n, L) - 1``."""
    t0 = time.perf_counter()
    m = min(hidden.shape[1], lm.geometry.trained_len) - 1
    kl, same = engine.kl_from_hidden(st.reference.hidden[i][:, :m], hidden[:, :m], chunk=min(proxy.KL_CHUNK, settings.chunk))
    return kl, same, time.perf_counter() - t0


def _proxy_rows(st: State, settings: Settings, n: int, indices: list, docs: list, kls: dict, mode: str, trained_len: int) -> list[Measurement]:
    """The ``--metrics`` rows of a cell of length ``n``: ``docs`` [(name, (n-1,) NLL)] of the
    documents ``indices``; ``kls`` {index: (KL, same top, seconds)} over a prefix at least this long."""
    rows: list[Measurement] = []
    if "longppl" in settings.metrics:
        masks = [st.reference.keys[i][: n - 1] for i in indices]
        rows += proxy.longppl_rows(docs, masks, mode, trained_len, sum(st.reference.seconds.get(i, 0.0) for i in indices))
    if "kl" in settings.metrics:
        m = min(n, trained_len) - 1
        per_doc = [(name, kls[i][0][:m], kls[i][1][:m]) for (name, _), i in zip(docs, indices, strict=True)]
        rows += proxy.kl_rows(per_doc, mode, sum(kls[i][2] for i in indices))
    return rows


def _shared_pass(lm, st: State, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    """One forward per document at the longest length it is selected for; shorter lengths
    read the prefix of its per-token losses (and of its KL per position)."""
    from ctxbench.model.measure import Measured  # start-up: loads torch

    lengths = sorted(c.length for c in group)
    need: dict[int, int] = {}  # doc -> longest length it serves in this group
    for n in lengths:
        for i in st.chosen[n]:
            need[i] = max(need.get(i, 0), n)
    losses: dict = {}
    kls: dict = {}
    cost_of: dict[int, tuple[float, float, int]] = {}  # doc -> (seconds, peak MB, tokens)
    cell0 = group[0]
    with lm.session(cell0.method, cell0.factor or 1.0, max(lengths)) as engine:
        for i, n in sorted(need.items()):
            with Measured(lm.device) as m:
                losses[i], hidden = _window(lm, engine, st.tokens[i][:n], settings)  # (n - 1,)
            if "kl" in settings.metrics:
                kls[i] = _kl(lm, engine, st, i, hidden, settings)
            hidden = None
            cost_of[i] = (m.seconds, m.peak_mb, n)
    for cell in sorted(group, key=lambda c: c.length):
        n = cell.length
        docs = [(st.tokens.corpus.names[i], losses[i][: n - 1]) for i in st.chosen[n]]
        seconds = sum(cost_of[i][0] for i in st.chosen[n])
        peak = max(cost_of[i][1] for i in st.chosen[n])
        pass_tokens = sum(cost_of[i][2] for i in st.chosen[n])
        extra = {"skipped_docs": st.skipped[n], "pass_lengths": sorted({need[i] for i in st.chosen[n]}), "corpus_digest": st.corpus_digest,
                 "bos": settings.bos}
        rows = _summary(docs, seconds, pass_tokens, peak, "truncate", extra, lm.geometry.trained_len)
        yield cell, rows + _proxy_rows(st, settings, n, st.chosen[n], docs, kls, "truncate", lm.geometry.trained_len)


def plots(records: list[dict], directory) -> list:
    """Perplexity against length per (model, factor), one line per method label with its 95%
    band, and loss by position per (model, factor, length), the trained length marked."""
    from matplotlib import ticker  # start-up: matplotlib only where it runs


    plt = pyplot()
    paths: list[Path] = []
    rows = ok_rows(records, "ppl", "ppl")
    bounds = {(r["model"], r["label"], factor_of(r), r["length"], r["metric"]): float(r["value"])
              for r in records if r["task"] == NAME and r["metric"] in ("ppl_lo", "ppl_hi") and r["status"] == "ok"}  # fmt: skip
    for (model, factor), part in sorted(by_factor([r for r in rows if r["doc"] == "all"]).items()):
        labels = sorted({r["label"] for r in part})
        beside = len(labels) > 8  # a long legend inside the axes hides lines: put it beside them
        fig, ax = plt.subplots(figsize=(9.5 if beside else 7.5, 4.8), dpi=120)
        trained = None
        for i, label in enumerate(labels):
            mine = sorted((r for r in part if r["label"] == label), key=lambda r: int(r["length"]))
            xs = [int(r["length"]) for r in mine]
            ys = [float(r["value"]) for r in mine]
            line, = ax.plot(xs, ys, marker="o", label=label, **series_style(i))
            lo = [bounds.get((model, label, factor_of(r), r["length"], "ppl_lo")) for r in mine]
            hi = [bounds.get((model, label, factor_of(r), r["length"], "ppl_hi")) for r in mine]
            if all(v is not None for v in lo + hi):
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
            trained = trained or extra_of(mine[0]).get("trained_len")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lengths = sorted({int(r["length"]) for r in part})
        ax.set_xticks(lengths, [len_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        if trained:
            mark_trained(ax, trained, f"trained {len_label(trained)}")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("perplexity (log scale; band: 95% bootstrap)")
        ax.set_title(f"ppl vs length — {model}, factor {factor or 'any'}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        legend(ax, beside)
        save(plt, fig, directory / f"ppl-{safe_name(model)}-x{factor or 'any'}.png", paths)
    paths += position_plots(records, directory)
    return paths


def position_plots(records: list[dict], directory) -> list:
    """NLL against position, one figure per (model, factor, length) that has nll_pos rows."""

    plt = pyplot()
    paths: list[Path] = []
    rows = ok_rows(records, "ppl", "nll_pos")
    for (model, factor), part in sorted(by_factor(rows).items()):
        for length in sorted({int(r["length"]) for r in part}):
            mine = [r for r in part if int(r["length"]) == length]
            fig, ax = plt.subplots(figsize=(9.5, 4.8), dpi=120)
            trained = None
            for i, label in enumerate(sorted({r["label"] for r in mine})):
                pts = sorted((_bucket(r), float(r["value"])) for r in mine if r["label"] == label)
                xs = [(a + b) / 2 for (a, b), _ in pts]
                ax.plot(xs, [v for _, v in pts], label=label, linewidth=1.4, marker="o" if len(pts) <= 8 else None, markersize=4,
                        **series_style(i))  # few buckets: show them  # fmt: skip
                trained = trained or extra_of(mine[0]).get("trained_len")
            if trained and trained < length:
                mark_trained(ax, trained, f"trained L = {len_label(trained)}")
            ax.set_xlabel("target position (tokens; 512-token buckets)")
            ax.set_ylabel("mean NLL (nats)")
            ax.set_title(f"loss by position — {model}, {len_label(length)} tokens, factor {factor or 'any'}", fontsize=10)
            ax.grid(True, alpha=0.3)
            legend(ax, beside=True)  # the lines fill the whole height: a legend inside hid the top one
            save(plt, fig, directory / f"nll-position-{safe_name(model)}-{len_label(length)}-x{factor or 'any'}.png", paths)
    return paths


def _bucket(record: dict) -> tuple[int, int]:
    """A loss-by-position row's ``[start, end)``: its own columns, or ``extra.pos`` in files from
    before those columns."""

    if record.get("pos_start", "") != "":
        return int(record["pos_start"]), int(record["pos_end"])
    start, end = extra_of(record)["pos"]
    return int(start), int(end)



TASK = Task(
    name=NAME,
    help="Perplexity over methods x factors x lengths (one pass serves every length).",
    settings=Settings,
    options=OPTIONS,
    prepare=prepare,
    cells=cells,
    groups=groups,
    run_group=run_group,
    cost=cost,
    metric="ppl",
    higher_is_better=False,
    default_lengths=default_lengths,
    plots=plots,
    validate=validate,
    shrink=lambda s: replace(s, chunk=max(64, s.chunk // 4)),  # LM-head chunks a quarter the size
    domains={"ppl": PERPLEXITY, "nll": NLL, "nll_pos": NLL, "nll_beyond_L": NLL, "docs": COUNT, "tokens_per_s": AMOUNT,
             "peak_mem_mb": AMOUNT, **proxy.PPL_DOMAINS},
)
