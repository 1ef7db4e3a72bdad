"""Tasks whose trials are prompts made offline, one per (variant, length, seed, trial), answered by
greedy decoding and scored by the benchmark's own scorers: InfiniteBench's ``kv-retrieval`` and
``number-string`` and BABILong (:func:`generated_task` builds each one's :class:`Task`).

Each cell (method, factor, length, variant) runs ``trials`` prompts; every method sees the same
prompts (built once per run, from a generator seeded by the run's seed, the length and the trial).
A trial is decoded greedily for the benchmark's number of new tokens
(:func:`ctxbench.tasks.trials.trial_cells`, through the backend's session: the transformers and
vLLM backends alike). Rows: per trial ``score`` (the headline scorer, 0 or 1) with the answer text
and every other scorer's verdict in ``extra.scores``; per cell ``accuracy`` (the headline scorer's
mean) and, for every further scorer ``S``, ``accuracy_S``, each with its 95% Wilson interval. The
per-trial rows are what ``rank``, ``report --baseline`` and ``compare`` pair by trial.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial

from ctxbench.errors import UserError
from ctxbench.synthetic.pieces import TooShort, frame
from ctxbench.tasks import thinking
from ctxbench.tasks.base import FRACTION, OUTCOME, Cell, Context, CostItem, Measurement, Option, Task
from ctxbench.tasks.common import (
    accuracy_rows,
    check_generation,
    check_trials,
    factors_for,
    generation_options,
    mode_note,
    most_trials,
    parse_chat,
    settle_mode,
    trial_cells,
    trials_options,
    variants_parser,
)
from ctxbench.tasks.options import mode_of_chat
from ctxbench.tasks.trials import ALL, numbered_trials


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/8, L/4, L/2, L
    variants: tuple[str, ...] = ()
    trials: int | str = 4  # or "auto" (the runner then runs batches of int trials)
    max_trials: int = 50
    budget: float | None = None
    baseline: str | None = None
    chat: bool | None = None  # None: decided by the task's spec once the model is loaded
    haystack: str | None = None  # babilong: the background text (default: the pydoc prose)
    data: str | None = None  # babilong: the published files instead of generated prompts
    prompt_mode: tuple[str, ...] | None = None  # onto chat (common.settle_mode)
    think_budget: int | None = None  # None: no budget (tasks.thinking)
    think_tags: tuple[str, str] | None = None


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 8, trained_len // 4, trained_len // 2, trained_len]


@dataclass(frozen=True)
class Spec:
    """What one generated task is: its name, variants, how a trial's prompt is made and scored.

    ``build(tokenizer, frame, variant, length, seed, trial, state) -> prompt`` (an object with
    ``ids``, ``answers``, ``max_new_tokens``, ``needle_positions`` and ``extra``; raising
    :class:`~ctxbench.synthetic.pieces.TooShort` for a length that cannot hold it);
    ``scorers``: name -> ``(output text, prompt) -> 0 or 1``, the first the headline;
    ``load(settings) -> (dataset, data digest fields, state, notes)`` the data the prompts come
    from (generated: only their recipe); ``chat``: the default of ``--chat`` (``"model"``: the
    model's chat template when its tokenizer ships one); ``items(settings) -> {variant: count}``:
    the items of a task's data (``--trials all``); ``forward(settings, length) -> tokens``: a
    prompt's rough size at ``length`` for plans (default ``length - max_new_tokens``)."""

    name: str
    variants: tuple[str, ...]
    default_variants: tuple[str, ...]
    build: Callable
    scorers: dict
    load: Callable
    chat: bool | str = False
    max_new_tokens: int = 32
    items: Callable | None = None
    forward: Callable | None = None


def chat_help(default: bool | str) -> str:
    said = "the model's chat template when its tokenizer ships one" if default == "model" else "raw prompts, as the benchmark's open-model template"
    return f"wrap the prompt in the model's chat template (default: {said}); --no-chat for raw prompts"


def generated_task(spec: Spec, help: str, extra_options: tuple[Option, ...] = (), settings: type = Settings,  # noqa: A002
                   trials_default: int | str = 4, **more) -> Task:
    """The task of ``spec``; ``settings``: a subclass of :class:`Settings` with the task's own
    fields; ``more``: further :class:`~ctxbench.tasks.base.Task` fields (``references``, ``legacy_options``)."""
    options = []
    if len(spec.variants) > 1:
        options.append(Option("variants", f"comma list of variants ({', '.join(spec.variants)}) or all; default {','.join(spec.default_variants)}",
                              variants_parser(spec.name, spec.variants), flag="--variant", identity=False))  # each variant is a cell  # fmt: skip
    options += trials_options("trials (prompts drawn from the seed and the trial's number)", default=trials_default)
    options.append(Option("chat", chat_help(spec.chat), parse_chat, is_flag=True, label=mode_of_chat))
    options += generation_options()
    options += list(extra_options)
    domains = {"accuracy": FRACTION, "score": OUTCOME, **{f"accuracy_{s}": FRACTION for s in list(spec.scorers)[1:]}}
    return Task(
        name=spec.name, help=help, settings=settings, options=tuple(options), items=spec.items, **more,
        prepare=partial(prepare, spec), cells=partial(cells, spec), groups=groups, run_group=partial(run_group, spec),
        cost=partial(cost, spec), metric="accuracy", higher_is_better=True, fraction=True, default_lengths=default_lengths,
        validate=partial(validate, spec), settle=partial(settle, spec), trials=numbered_trials, domains=domains,
    )  # fmt: skip


def settle(spec: Spec, lm, settings: Settings) -> Settings:
    """``--prompt-mode`` onto ``chat``; ``chat`` left to the spec's rule; the thinking budget."""
    settings = settle_mode(settings)
    if settings.chat is None:
        ships = bool(getattr(lm.tokenizer, "chat_template", None))
        settings = replace(settings, chat=ships if spec.chat == "model" else bool(spec.chat))
    return thinking.settle(lm, settings)


def validate(spec: Spec, settings: Settings) -> None:
    """Before any model loads: the trials, and the data the prompts come from."""
    check_trials(settings, items=spec.items is not None and bool(getattr(settings, "data", None)))
    check_generation(settings, spec.max_new_tokens)
    spec.load(settings)


def trials_of(spec: Spec, settings: Settings, variant: str) -> int:
    """The trials a cell of ``variant`` runs: ``--trials N``, or every item of its data (``all``)."""
    if settings.trials == ALL:
        assert spec.items is not None  # (validate refuses --trials all where the spec has no items)
        return spec.items(settings)[variant]
    assert isinstance(settings.trials, int)  # (--trials auto: the runner runs batches of int trials)
    return settings.trials


def prompt_variants(spec: Spec, settings: Settings) -> tuple[str, ...]:
    return settings.variants or spec.default_variants


def prepare(spec: Spec, lm, settings: Settings) -> Context:
    """The data (or recipe) and its digest; every length must hold the first trial of every variant."""
    lengths = tuple(settings.lengths or default_lengths(lm.geometry.trained_len))
    dataset, fields, state, notes = spec.load(settings)
    tok = thinking.prompt_tokenizer(lm.tokenizer, settings)
    fr = frame(tok, bool(settings.chat))
    ctx_state = {"lengths": lengths, "data": state, "frame": fr, "prompts": {}}
    for variant in prompt_variants(spec, settings):
        for n in lengths:
            try:
                spec.build(tok, fr, variant, thinking.room(settings, n), 0, 0, state)
            except TooShort as exc:
                if thinking.reserve(settings):
                    raise thinking.too_short(settings, n, exc.minimum) from None
                raise UserError(f"length {n} is too short for {spec.name} {variant} (needs at least {exc.minimum} tokens with this tokenizer)",
                                f"use --len of at least {exc.minimum}") from None  # fmt: skip
    fields = {"task": spec.name, "chat": settings.chat, **fields}
    digest = "sha256:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return Context(dataset=dataset + ("-chat" if settings.chat else ""), data_digest=digest, notes=[*notes, *mode_note(lm, settings)], state=ctx_state)


def cells(spec: Spec, settings: Settings, ctx: Context) -> list[Cell]:
    return [
        Cell(spec.name, m, f, n, variant=v)
        for v in prompt_variants(spec, settings)
        for m in settings.methods
        for f in factors_for(m, settings.factors)
        for n in ctx.state["lengths"]
    ]


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    """Every variant of one (method, factor, length): decoded together."""
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        out.setdefault((cell.method, cell.factor, cell.length), []).append(cell)
    return list(out.values())


def cost(spec: Spec, settings: Settings, trained_len: int) -> list[CostItem]:
    lengths = settings.lengths or default_lengths(trained_len)
    items = []
    for variant in prompt_variants(spec, settings):
        k = trials_of(spec, settings, variant) if settings.trials == ALL else most_trials(settings)
        for m in settings.methods:
            for f in factors_for(m, settings.factors):
                # one forward per trial
                forwards = tuple(max(1, spec.forward(settings, n) if spec.forward else n - spec.max_new_tokens) for n in lengths)
                items.append(CostItem(cells=len(lengths), forwards=forwards, counts=(k,) * len(forwards),
                                      decode_steps=len(lengths) * k * (spec.max_new_tokens + thinking.reserve(settings)),
                                      what=f"{m.label} x{f:g}" if f else m.label, path=m.attention_path))  # fmt: skip
    return items


def prompts_for(spec: Spec, lm, ctx: Context, variant: str, length: int, trials: int, settings=None) -> list:
    """The trials' prompts of one (variant, length), built once per run and shared by every method."""
    cache = ctx.state["prompts"]
    out = []
    for t in range(trials):
        key = (variant, length, ctx.seed, t)
        if key not in cache:
            cache[key] = spec.build(thinking.prompt_tokenizer(lm.tokenizer, settings), ctx.state["frame"], variant,
                                    thinking.room(settings, length), ctx.seed, t, ctx.state["data"])  # fmt: skip
        out.append(cache[key])
    return out


def run_group(spec: Spec, lm, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    tok = lm.tokenizer
    prompts = {cell: prompts_for(spec, lm, ctx, cell.variant, cell.length, trials_of(spec, settings, cell.variant), settings) for cell in group}
    new_tokens = max(p.max_new_tokens for ps in prompts.values() for p in ps)
    headline, *others = list(spec.scorers)

    def measure(trial, p, new, seconds) -> Measurement:
        text = tok.decode(list(new), skip_special_tokens=True)
        verdicts = {name: float(fn(text, p)) for name, fn in spec.scorers.items()}
        return Measurement("score", verdicts[headline], trial=trial, answer=text.strip(), tokens=len(p.ids), seconds=round(seconds, 4),
                           extra={"answers": list(p.answers), "scores": verdicts, "scorer": headline, "needle_pos": list(p.needle_positions),
                                  **p.extra})  # fmt: skip

    for cell, rows in trial_cells(lm, ctx, prompts, new_tokens, measure, think=thinking.thinking_of(tok, settings), mode=mode_of_chat(settings.chat)):
        tokens, seconds = sum(r.tokens for r in rows), sum(r.seconds for r in rows)
        out = rows + accuracy_rows([r.value for r in rows], tokens, seconds, metric=headline, **thinking.outcomes(rows))
        for name in others:
            more = accuracy_rows([float(r.extra.get("scores", {}).get(name, float("nan"))) for r in rows], tokens, 0.0, metric=name)
            out += [replace(m, metric=m.metric.replace("accuracy", f"accuracy_{name}", 1)) for m in more]
        yield cell, out
