"""LongBench v2 (``ctxbench longbench2 --data FILE|HUB_ID``; arXiv 2412.15204): multiple-choice questions
over long real documents (:mod:`ctxbench.synthetic.longbench2` reads the items, builds the official
prompt and extracts the answer).

The data is the user's: a local JSON/JSONL file in either public layout (``choice_A`` ..
``choice_D`` or a ``choices`` list), or a hub id (``THUDM/LongBench-v2``), read with ``datasets``
only when named. A bad file is one line naming the file, the item and the field, before any model
loads. The items' digest is every row's ``data_digest``.

Cells are (method, factor, length, bucket): the bucket is the item's ``length`` field (short,
medium, long; ``--variant``), trial ``t`` the bucket's ``t``-th item in file order. ``--len`` is the
most tokens a prompt may take with its answer: a longer one is cut in the middle as the official
``pred.py`` cuts it, and each trial's row records the tokens cut (``extra.truncated``).

``--mode`` (part of the cell identity): ``mc`` (default) scores the log-likelihood of A, B, C and D
after the prompt and ``The correct answer is (`` in one prefill per letter sharing the prompt's
cache (lm-evaluation-harness's formulation; the backend's ``scores``); ``generate`` decodes up to
128 tokens and extracts the letter as ``pred.py`` does (the backend's ``answers``). Both backends
serve both calls. Per-trial ``score`` rows (right or wrong) are what paired verdicts pair.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ctxbench.errors import UserError, unknown
from ctxbench.parsing import split_list
from ctxbench.synthetic import longbench2 as lb
from ctxbench.synthetic.pieces import encode, frame
from ctxbench.tasks.base import FRACTION, OUTCOME, Cell, Context, CostItem, Measurement, Option, Task
from ctxbench.tasks.common import (
    accuracy_rows,
    check_trials,
    factors_for,
    most_trials,
    parse_chat,
    trial_cells,
    trials_options,
)
from ctxbench.tasks.generated import settle as _settle
from ctxbench.tasks.trials import numbered_trials

MODES = ("mc", "generate")
HINT = "give LongBench v2's items (THUDM/LongBench-v2) as JSON/JSONL with question, context, answer, length and choice_A..D or choices"


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/2, L
    variants: tuple[str, ...] = ()  # (): every bucket the data holds
    trials: int | str = 4
    max_trials: int = 50
    budget: float | None = None
    baseline: str | None = None
    chat: bool | None = None
    data: str | None = None
    mode: str = "mc"


@dataclass(frozen=True)
class Prompt:
    ids: tuple[int, ...]
    answers: tuple[str, ...]
    max_new_tokens: int
    needle_positions: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict, hash=False)


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 2, trained_len]


def _buckets(value) -> tuple[str, ...]:
    items = split_list(value, what="--variant") if not isinstance(value, (list, tuple)) else [str(v) for v in value]
    if items == ["all"]:
        return lb.BUCKETS
    for item in items:
        if item not in lb.BUCKETS:
            raise unknown("longbench2 length bucket", item, [*lb.BUCKETS, "all"])
    return tuple(items)


def _mode(value) -> str:
    text = str(value).strip()
    if text not in MODES:
        raise unknown("--mode", text, MODES)
    return text


OPTIONS = (
    Option("data", "LongBench v2's items: a local JSON/JSONL file (choice_A..D or a choices list) or a hub id "
           "(THUDM/LongBench-v2, read with datasets only when named). Required; its digest is on every row", str,
           metavar="FILE|HUB_ID", identity=False),  # fmt: skip
    Option("variants", "length buckets: short, medium, long or all; default every bucket the data holds", _buckets,
           flag="--variant", identity=False),  # fmt: skip
    Option("mode", "mc: log-likelihood of A/B/C/D after the prompt (prefill only); generate: decode and extract "
           "'The correct answer is (X)' as the official pred.py (default mc)", _mode),  # fmt: skip
    *trials_options("trials (trial t is the bucket's t-th item)"),
    Option("chat", "wrap the prompt in the model's chat template (default: the model's template when its tokenizer ships one); "
           "--no-chat for raw prompts", parse_chat, is_flag=True),  # fmt: skip
)


@functools.lru_cache(maxsize=4)
def _file(path: str, mtime_ns: int, size: int) -> tuple[lb.Item, ...]:
    try:
        return tuple(lb.read_items(Path(path).read_bytes(), f"--data '{path}'"))
    except lb.BadItems as exc:
        raise UserError(str(exc), HINT) from None


@functools.lru_cache(maxsize=2)
def _hub(name: str) -> tuple[lb.Item, ...]:
    try:
        import datasets

        rows = [dict(r) for r in datasets.load_dataset(name, split="train")]
    except Exception as exc:  # noqa: BLE001  datasets raises many types for "not found / offline"
        raise UserError(f"cannot load --data '{name}' from the Hugging Face hub ({type(exc).__name__})",
                        "check the name and network, or give a local JSON/JSONL file") from None  # fmt: skip
    try:
        return tuple(lb.read_items(json.dumps(rows).encode(), f"--data '{name}'"))
    except lb.BadItems as exc:
        raise UserError(str(exc), HINT) from None


def items_of(spec: str | None) -> tuple[lb.Item, ...]:
    if not spec:
        raise UserError("longbench2 needs its items and no --data was given (nothing is downloaded by default)",
                        "pass --data longbench2.json (a local file) or --data THUDM/LongBench-v2 (the hub, with datasets)")  # fmt: skip
    path = Path(spec).expanduser()
    if path.is_file():
        stat = path.stat()
        return _file(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if path.exists() or path.suffix.lower() in (".json", ".jsonl") or spec.startswith((".", "/", "~")):
        raise UserError(f"--data '{spec}' is not a file", HINT)
    return _hub(spec)


def _by_bucket(items, settings: Settings) -> dict[str, list]:
    out: dict[str, list] = {}
    for item in items:
        out.setdefault(item.bucket, []).append(item)
    run = settings.variants or tuple(b for b in lb.BUCKETS if b in out)
    for b in run:
        if len(out.get(b, [])) < most_trials(settings):
            raise UserError(f"--trials {most_trials(settings)} is more than the {len(out.get(b, []))} {b} items of --data '{settings.data}'",
                            f"use --trials {len(out.get(b, []))} or fewer, or drop {b} from --variant")  # fmt: skip
    return {b: out[b] for b in run}


def validate(settings: Settings) -> None:
    check_trials(settings)
    _by_bucket(items_of(settings.data), settings)


def prepare(lm, settings: Settings) -> Context:
    items = items_of(settings.data)
    buckets = _by_bucket(items, settings)
    lengths = tuple(settings.lengths or default_lengths(lm.geometry.trained_len))
    digest = hashlib.sha256(json.dumps([[i.id, i.question, i.context, list(i.choices), i.answer, i.bucket] for i in items]).encode()).hexdigest()[:16]
    fields = {"task": "longbench2", "chat": settings.chat, "data": digest}
    name = Path(settings.data).name if Path(settings.data).expanduser().is_file() else settings.data
    state = {"lengths": lengths, "buckets": buckets, "frame": frame(lm.tokenizer, bool(settings.chat)), "prompts": {}}
    return Context(dataset=f"longbench2:{name}" + ("-chat" if settings.chat else ""),
                   data_digest="sha256:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16],
                   notes=[f"{b}: {len(v)} items" for b, v in buckets.items()], state=state)  # fmt: skip


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    return [Cell("longbench2", m, f, n, variant=b) for b in ctx.state["buckets"] for m in settings.methods
            for f in factors_for(m, settings.factors) for n in ctx.state["lengths"]]  # fmt: skip


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        out.setdefault((cell.method, cell.factor, cell.length), []).append(cell)
    return list(out.values())


def cost(settings: Settings, trained_len: int) -> list[CostItem]:
    lengths = settings.lengths or default_lengths(trained_len)
    steps = lb.MAX_NEW_TOKENS if settings.mode == "generate" else 0
    buckets = settings.variants or lb.BUCKETS
    return [CostItem(cells=len(lengths), forwards=tuple(lengths), counts=(most_trials(settings) * (1 if steps else 4),) * len(lengths),
                     decode_steps=len(lengths) * most_trials(settings) * steps, what=f"{b} {m.label}")
            for b in buckets for m in settings.methods for _ in factors_for(m, settings.factors)]  # fmt: skip


def build(tokenizer, fr, item: lb.Item, length: int, mode: str) -> Prompt:
    """The official prompt of ``item`` for ``length`` tokens with its answer: cut in the middle
    when longer (``pred.py``); under ``mc`` the answer prefix follows the cut prompt."""
    body = list(fr.head) + encode(tokenizer, lb.prompt_text(item) + fr.between)
    tail = encode(tokenizer, lb.MC_PREFIX) if mode == "mc" else []
    room = length - (lb.MAX_NEW_TOKENS if mode == "generate" else len(tail) + 1)
    if room < 2:
        raise UserError(f"length {length} is too short for longbench2 --mode {mode}", f"use --len of at least {length - room + 64}")
    ids, cut = lb.truncate_middle(body, room)
    return Prompt(tuple(ids + tail), (item.answer,), lb.MAX_NEW_TOKENS, extra={"id": item.id, "truncated": cut, "prompt_tokens": len(body)})


def prompts_for(lm, ctx: Context, settings: Settings, cell: Cell) -> list[Prompt]:
    cache = ctx.state["prompts"]
    out = []
    for t in range(settings.trials):
        key = (cell.variant, cell.length, settings.mode, t)
        if key not in cache:
            cache[key] = build(lm.tokenizer, ctx.state["frame"], ctx.state["buckets"][cell.variant][t], cell.length, settings.mode)
        out.append(cache[key])
    return out


def run_group(lm, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    tok = lm.tokenizer
    prompts = {cell: prompts_for(lm, ctx, settings, cell) for cell in group}
    if settings.mode == "generate":
        def measure(trial, p, new, seconds) -> Measurement:
            text = tok.decode(list(new), skip_special_tokens=True)
            pred = lb.extract_answer(text)
            return Measurement("score", float(pred == p.answers[0]), trial=trial, answer=text.strip(), tokens=len(p.ids),
                               seconds=round(seconds, 4), extra={"answers": list(p.answers), "pred": pred, **p.extra})  # fmt: skip

        results = trial_cells(lm, ctx, prompts, lb.MAX_NEW_TOKENS, measure)
    else:
        results = _mc_cells(lm, ctx, prompts)
    for cell, rows in results:
        yield cell, rows + accuracy_rows([r.value for r in rows], sum(r.tokens for r in rows), sum(r.seconds for r in rows))


def _mc_cells(lm, ctx: Context, prompts: dict):
    """Each trial's four letters scored after its prompt (one shared prefix per trial); trials the
    results file holds are kept (``ctx.kept``)."""
    from ctxbench import backends
    from ctxbench.tasks.trials import decode_length

    kept = getattr(ctx, "kept", None) or {}
    letters = [encode(lm.tokenizer, x) for x in lb.LETTERS]
    owner = [(cell, t, k) for cell, ps in prompts.items() for t in range(len(ps)) if t not in kept.get(cell, {}) for k in range(4)]
    nll: dict = {}
    seconds: dict = {}
    first = next(iter(prompts))
    if owner:
        flat = [prompts[c][t].ids for c, t, _ in owner]
        with backends.session(lm, first.method, first.factor or 1.0, decode_length(first, [prompts[c][t] for c, t, _ in owner], 1)) as engine:
            for s in engine.scores(flat, [letters[k] for _, _, k in owner], share=first.method.causal):
                c, t, k = owner[s.index]
                nll[(c, t, k)] = float(s.nll.double().sum())
                seconds[(c, t)] = seconds.get((c, t), 0.0) + s.seconds
    for cell, ps in prompts.items():
        rows = []
        for t, p in enumerate(ps):
            if t in kept.get(cell, {}):
                rows.append(kept[cell][t])
                continue
            scores = {x: nll[(cell, t, k)] for k, x in enumerate(lb.LETTERS)}
            pred = min(lb.LETTERS, key=lambda x: scores[x])
            rows.append(Measurement("score", float(pred == p.answers[0]), trial=t, answer=pred, tokens=len(p.ids),
                                    seconds=round(seconds.get((cell, t), 0.0), 4),
                                    extra={"answers": list(p.answers), "pred": pred, "letter_nll": scores, **p.extra}))  # fmt: skip
        yield cell, rows


TASK = Task(
    name="longbench2", help="LongBench v2 multiple choice over your copy of the items (--data FILE|HUB_ID): by log-likelihood "
    "of A-D (--mode mc) or generation (--mode generate), x length buckets x lengths (middle truncation) x methods.",
    settings=Settings, options=OPTIONS, prepare=prepare, cells=cells, groups=groups, run_group=run_group, cost=cost,
    metric="accuracy", higher_is_better=True, fraction=True, default_lengths=default_lengths, validate=validate,
    settle=lambda lm, s: _settle(_CHAT, lm, s), trials=numbered_trials, domains={"accuracy": FRACTION, "score": OUTCOME},
)  # fmt: skip


class _Chat:
    chat = "model"


_CHAT = _Chat()
