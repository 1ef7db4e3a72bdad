"""An example ctxbench task plug-in: ``ctxbench lastword``.

Each trial is a passage of ``length`` tokens of the built-in corpus (the running Python's stdlib)
followed by nothing else; the model is scored on its loss for the passage's last 32 tokens, with
the whole passage as context (a LAMBADA-like "does long context help the ending" measure). The
headline metric is ``nll_tail`` (lower is better). It registers with one entry point; nothing in
ctxbench changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxbench.tasks.base import Cell, Context, CostItem, Measurement, Option, Task
from ctxbench.tasks.common import factors_for, parse_positive_int

TAIL = 32


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple
    lengths: tuple | None = None
    passages: int = 2


def prepare(lm, settings):
    from ctxbench.tasks.corpus import Tokenized, load_corpus

    corpus = load_corpus(None)
    tokens = Tokenized(corpus, lm.tokenizer)
    lengths = settings.lengths or (512, 1024)
    chosen = tokens.select(list(lengths), settings.passages)
    return Context(dataset=corpus.name, data_digest=corpus.digest, state=(tokens, lengths, chosen))


def cells(settings, ctx):
    _, lengths, _ = ctx.state
    return [Cell("lastword", m, f, n) for m in settings.methods for f in factors_for(m, settings.factors) for n in lengths]


def groups(todo, settings):
    return [[c] for c in todo]


def run_group(lm, ctx, group, settings):
    from ctxbench.methods.patching import applied
    from ctxbench.model.scoring import token_nll

    tokens, _, chosen = ctx.state
    for cell in group:
        losses = []
        with applied(lm.model, lm.geometry, cell.method, cell.factor or 1.0, cell.length):
            for i in chosen[cell.length]:
                nll = token_nll(lm.model, tokens[i][: cell.length])  # (length - 1,)
                losses.append(float(nll[-TAIL:].double().mean()))
        yield cell, [Measurement("nll_tail", sum(losses) / len(losses), tokens=TAIL * len(losses), extra={"passages": len(losses)})]


def cost(settings, trained_len):
    lengths = settings.lengths or (512, 1024)
    return [CostItem(cells=len(lengths), forwards=tuple(n for n in lengths for _ in range(settings.passages)), what=m.label)
            for m in settings.methods]  # fmt: skip


TASK = Task(
    name="lastword", help="Loss on the last 32 tokens of long stdlib passages (example plug-in).", settings=Settings,
    # passages changes every number of a cell, so it is part of the cell's identity (identity=True,
    # the default): `--passages 2` into a file holding a `--passages 1` run runs its own cells.
    options=(Option("passages", "passages per length (default 2)", lambda v: parse_positive_int(v, "--passages"), identity=True),),
    prepare=prepare, cells=cells, groups=groups, run_group=run_group, cost=cost, metric="nll_tail", higher_is_better=False,
    default_lengths=lambda trained_len: [512, 1024],
)
