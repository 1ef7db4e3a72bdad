"""Cheap proxy metrics of the built-in tasks, chosen with ``--metrics`` (default: none of them, so
a default run's rows and cell identities are what they always were).

- ``longppl`` (``ppl``): perplexity over *key tokens* only (Fang et al., ICLR 2025, "What is Wrong
  with Perplexity for Long-context Language Modeling?", arXiv 2410.23771; PKU-ML/LongPPL
  ``longppl/longppl.py``). A target token is key when the evaluator's loss on it with a short
  context exceeds its loss with the long context by more than ``ALPHA`` = 2 (the long-short
  difference, LSD > 2) while the long-context loss is below ``-BETA`` = 2 (log-prob > -2). The
  evaluator is the unscaled model (method ``none``) within its trained length ``L``: the short
  context is :func:`short_window` = ``L/4`` tokens (LongPPL: 4096 for an 8B evaluator) in windows
  advancing by :func:`short_stride` = ``L/16`` (LongPPL's 1024 = 4096/4), so a target sees between
  ``L/4`` and ``5L/16 - 1`` tokens; the long context is windows of ``L`` tokens advancing by
  ``L/4``, all of the prefix inside ``L`` and between ``3L/4`` and ``L - 1`` tokens beyond it (the
  evaluator never reads past what it was trained on). ``LongPPL = exp(mean NLL of the method on the
  key tokens)``.
- ``kl`` (``ppl``): the mean over target positions ``1 .. min(n, L) - 1`` of ``KL(P_none || P_method)``
  per position, in nats (llama.cpp ``tools/perplexity/perplexity.cpp`` ``--kl-divergence``, the
  unscaled model as its base): how far a method moves the model's next-token distribution inside
  the trained length, where the unscaled model is the reference.
- ``answer_nll`` (``passkey``, ``niah``): the teacher-forced mean NLL per token of the expected
  answer after the prompt (the pass key; niah's values joined by ", "), with no decoding: scored on
  the trial's own prefill (the answer's tokens go through on a copy of the prompt's cache), so it
  costs the answer's few tokens beside decoding; a method that is not causal (``ms-poe``) and
  trials from a run without the metric take a forward of their own.

Each reference is computed once and reused: key tokens and the unscaled model's final hidden
states (not its logits) once per document for the whole grid (:class:`Reference`); the LM head
runs a few hundred positions at a time, so no (positions x vocab) tensor of a long sequence exists.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ctxbench.errors import UserError, unknown
from ctxbench.methods import resolve
from ctxbench.parsing import split_list
from ctxbench.tasks.base import COUNT, DIVERGENCE, NLL, PERPLEXITY, Measurement, Option

PPL_METRICS = ("longppl", "kl")
ANSWER_METRICS = ("answer_nll",)
ALPHA = 2.0  # LongPPL's alpha: a key token's short-context loss exceeds its long-context loss by more than this
BETA = -2.0  # LongPPL's beta: a key token's long-context log-prob is above this (loss below -BETA)
# How reports read each proxy's aggregate rows (a table per metric beside the task's headline one):
# for all three, lower is better (fewer nats lost, closer to the unscaled model).
HIGHER_IS_BETTER = {"longppl": False, "kl": False, "answer_nll": False}
# The values each proxy's rows can take (ctxbench.tasks.base.Domain), declared by the tasks that write them.
PPL_DOMAINS = {"longppl": PERPLEXITY, "key_tokens": COUNT, "kl": DIVERGENCE}
ANSWER_DOMAINS = {"answer_nll": NLL}
KL_CHUNK = 256  # positions per LM-head chunk of the KL divergence (two (chunk, vocab) fp32 tensors)


def short_window(trained_len: int) -> int:
    """LongPPL's short context for an evaluator trained at ``trained_len``: a quarter of it."""
    return max(1, trained_len // 4)


def short_stride(trained_len: int) -> int:
    """Targets sharing one short window (LongPPL's ``sliding_window``, a quarter of its short context)."""
    return max(1, short_window(trained_len) // 4)


def long_stride(trained_len: int) -> int:
    """The long context's windows of ``trained_len`` tokens advance by a quarter of it."""
    return short_window(trained_len)


def parse_metrics(value, choices: tuple[str, ...]) -> tuple[str, ...]:
    """``--metrics kl,longppl`` (or a TOML list) -> the names in ``choices`` order, so the same set
    given in any order is the same cell; an unknown name is one error naming the closest."""

    if isinstance(value, (list, tuple)) and not value:  # a suite's ``metrics = []``: none
        return ()
    if isinstance(value, (list, tuple)):  # --metrics given several times (or a TOML list): every value, merged
        items = [item for part in value for item in split_list(str(part), what="--metrics")]
    else:
        items = split_list(value, what="--metrics")
    for item in items:
        if item not in choices:
            raise unknown("--metrics metric", item, choices)
    if len(set(items)) != len(items):
        raise UserError("a --metrics name is given twice", "list each metric once")
    return tuple(c for c in choices if c in items)


def metrics_option(choices: tuple[str, ...], what: str) -> Option:
    """The ``--metrics`` option of a task: part of the cell identity only when some are chosen, and
    never a table's setting (it adds rows; the headline's numbers are the same without it).
    Repeatable, its values merged, as ``--param`` is: ``--metrics kl --metrics longppl`` is
    ``--metrics kl,longppl`` (a repeated flag kept only its last value before)."""
    return Option("metrics", f"comma list of proxy metrics to add ({', '.join(choices)}), repeatable: {what}; default: none",
                  lambda v: parse_metrics(v, choices), identity=True, omit_default=True, adds_rows=True, repeatable=True)  # fmt: skip


# ---------------------------------------------------------------------------------------- LongPPL


def key_token_mask(short_nll, long_nll, first: int, alpha: float | None = None, beta: float | None = None):
    """LongPPL's selection over targets ``1 .. n-1`` (tensors (n-1,)): ``short - long > alpha`` and
    ``long < -beta``, at target positions ``>= first`` (LongPPL scores no target before its short
    context is full). Returns (n-1,) bool."""
    import torch  # start-up: torch only where it runs

    alpha = ALPHA if alpha is None else alpha
    beta = BETA if beta is None else beta
    positions = torch.arange(1, long_nll.shape[0] + 1)  # target position of each loss
    return ((short_nll - long_nll) > alpha) & (long_nll < -beta) & (positions >= first)


def find_key_tokens(session, ids, trained_len: int, chunk: int = 1024):
    """Key-token mask (n-1,) of ``ids`` (n,) from ``session`` (a :class:`ctxbench.backends.base.Session`
    of the unscaled model, ``none``): a prefix of ``ids`` gets the prefix of the mask, since every
    window starts at a multiple of its stride from 0."""
    w, s = short_window(trained_len), short_stride(trained_len)
    long = session.sliding_nll(ids, trained_len, long_stride(trained_len), chunk)  # (n-1,) context <= L-1
    short = session.sliding_nll(ids, w + s, s, chunk)  # (n-1,) context w .. w+s-1 past position w
    return key_token_mask(short, long, first=w)


def evaluator_forwards(n: int, trained_len: int, metrics: tuple[str, ...]) -> tuple[int, ...]:
    """Token counts of the unscaled model's forwards over one document of ``n`` tokens."""
    out: list[int] = []
    if "longppl" in metrics:
        w, s = short_window(trained_len), short_stride(trained_len)
        for window, stride in ((trained_len, long_stride(trained_len)), (w + s, s)):
            begin, scored = 0, 1
            while scored < n:
                out.append(min(begin + window, n) - begin)
                scored, begin = min(begin + window, n), begin + stride
    if "kl" in metrics:
        out.append(min(n, trained_len))
    return tuple(out)


@dataclass
class Reference:
    """What the unscaled model says of each document, computed once and reused by every method
    of the grid: its key-token mask (``longppl``; (n-1,) bool over the document's longest scored
    prefix) and its final hidden states at positions ``0 .. min(n, L) - 2`` (``kl``; (1, m, hidden),
    on the model's device, the logits rebuilt chunk by chunk when needed)."""

    keys: dict = field(default_factory=dict)  # doc index -> (n-1,) bool
    hidden: dict = field(default_factory=dict)  # doc index -> (1, min(n, L) - 1, hidden)
    seconds: dict = field(default_factory=dict)  # doc index -> seconds the evaluator took

    def ensure(self, lm, docs: dict, metrics: tuple[str, ...], chunk: int) -> None:
        """Compute what ``metrics`` need for the documents ``{index: ids}`` not done yet."""
        todo = {i: ids for i, ids in docs.items() if ("longppl" in metrics and i not in self.keys) or ("kl" in metrics and i not in self.hidden)}
        if not todo:
            return
        trained = lm.geometry.trained_len
        with lm.session(resolve("none"), 1.0, max(len(ids) for ids in todo.values())) as unscaled:
            for i, ids in todo.items():
                t0 = time.perf_counter()
                if "longppl" in metrics and i not in self.keys:
                    self.keys[i] = find_key_tokens(unscaled, ids, trained, chunk)
                if "kl" in metrics and i not in self.hidden:
                    m = min(len(ids), trained)
                    self.hidden[i] = unscaled.hidden(ids[:m])[:, : m - 1].clone()  # (1, m-1, hidden)
                self.seconds[i] = self.seconds.get(i, 0.0) + time.perf_counter() - t0


def longppl_rows(docs: list, masks: list, mode: str, trained_len: int, evaluator_seconds: float) -> list[Measurement]:
    """LongPPL of one cell: ``docs`` [(name, (n-1,) NLL)], ``masks`` their key-token masks (n-1,).
    Rows: per document with key tokens and aggregate (``doc = all``, token-weighted as ``ppl``)
    ``longppl``; its 95% ``longppl_lo``/``_hi`` (the bootstrap ``ppl`` uses, over the key tokens);
    ``key_tokens`` (their number; ``extra.per_doc``)."""
    from ctxbench.stats import ppl_interval  # start-up: loads numpy

    rows, keyed, per_doc = [], [], {}
    for (name, nll), mask in zip(docs, masks, strict=True):
        key = nll[mask[: nll.shape[0]]].double()
        per_doc[name] = int(key.numel())
        keyed.append(key.numpy())
        if key.numel():
            rows.append(Measurement("longppl", math.exp(float(key.mean())), doc=name, tokens=int(key.numel()), mode=mode))
    count = sum(per_doc.values())
    total = float(sum(k.sum() for k in keyed))
    how = {"short_window": short_window(trained_len), "short_stride": short_stride(trained_len), "long_window": trained_len,
           "long_stride": long_stride(trained_len), "alpha": ALPHA, "beta": BETA, "evaluator": "none",
           "evaluator_seconds": round(evaluator_seconds, 4)}  # fmt: skip
    value = math.exp(total / count) if count else float("nan")
    lo, hi, unit = ppl_interval(keyed) if count else (float("nan"), float("nan"), "nothing (no key tokens)")
    agg: dict[str, Any] = dict(doc="all", tokens=count, mode=mode)
    rows.append(Measurement("longppl", value, extra=how, **agg))
    rows.append(Measurement("longppl_lo", lo, extra={"interval": f"95% bootstrap over {unit}"}, **agg))
    rows.append(Measurement("longppl_hi", hi, extra={"interval": f"95% bootstrap over {unit}"}, **agg))
    rows.append(Measurement("key_tokens", count, doc="all", tokens=sum(int(nll.shape[0]) for _, nll in docs), mode=mode,
                            extra={"per_doc": per_doc}))  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------- KL


def kl_rows(docs: list, mode: str, seconds: float) -> list[Measurement]:
    """KL to the unscaled model of one cell: ``docs`` [(name, (m,) KL per position, (m,) same top
    token)]. Rows: per document and aggregate ``kl`` (mean over all positions pooled, nats), its
    95% ``kl_lo``/``kl_hi`` (bootstrap over documents, or one document's blocks, as ``ppl``);
    ``extra`` holds llama.cpp's other statistics: ``stderr`` (its ``±``), median, 99th percentile,
    maximum, and ``same_top`` (the share of positions whose most likely token agrees)."""
    import numpy as np  # start-up: numpy only where it runs

    from ctxbench.stats import mean_interval, mean_stderr  # start-up: loads numpy

    rows = []
    for name, kl, _ in docs:
        rows.append(Measurement("kl", float(kl.double().mean()), doc=name, tokens=int(kl.numel()), mode=mode))
    values = np.concatenate([kl.double().numpy() for _, kl, _ in docs])
    same = float(np.concatenate([s.numpy() for _, _, s in docs]).mean())
    lo, hi, unit = mean_interval([kl.double().numpy() for _, kl, _ in docs])
    stats = {"stderr": mean_stderr(values), "median": float(np.median(values)), "p99": float(np.quantile(values, 0.99)),
             "max": float(values.max()), "same_top": same, "positions": "1 .. min(length, trained_len) - 1"}  # fmt: skip
    agg: dict[str, Any] = dict(doc="all", tokens=int(values.size), mode=mode)
    rows.append(Measurement("kl", float(values.mean()), seconds=round(seconds, 4), extra=stats, **agg))
    rows.append(Measurement("kl_lo", lo, extra={"interval": f"95% bootstrap over {unit}"}, **agg))
    rows.append(Measurement("kl_hi", hi, extra={"interval": f"95% bootstrap over {unit}"}, **agg))
    return rows


# ----------------------------------------------------------------------------------- answer NLL


