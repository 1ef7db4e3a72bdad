"""LongBench v2 (``ctxbench longbench2 --data FILE|HUB_ID``; arXiv 2412.15204): multiple-choice questions
over long real documents (:mod:`ctxbench.synthetic.longbench2` reads the items, builds the official
prompt and extracts the answer).

The data is the user's: a local JSON/JSONL file in either public layout (``choice_A`` ..
``choice_D`` or a ``choices`` list), or a hub id (``THUDM/LongBench-v2``), read with ``datasets``
only when named. A bad file is one line naming the file, the item and the field, before any model
loads. The items' digest is every row's ``data_digest``.

Cells are (method, factor, length, bucket): the bucket is the item's ``length`` field (short,
medium, long; ``--variant``), trial ``t`` the bucket's ``t``-th item in file order; by default
(``--trials all``) every item of the bucket runs, as LongBench v2 reports every item.

``--template`` (part of the cell identity) picks the reference the prompt, its truncation and its
length accounting are held to (:mod:`ctxbench.synthetic.longbench2`): ``longbench`` (default,
``pred.py``: ``--len`` is the most tokens of the prompt text, cut in the middle, the chat wrapper
and the answer not counted) or ``lm-eval`` (lm-evaluation-harness's ``longbench2``: raw text,
`` A``-`` D`` scored after ``Answer:``, ``--len`` its ``max_length``, cut from the left). Each
trial's row records the tokens cut (``extra.truncated``). Rows written before ``--template`` read
as ``template: legacy`` (the earlier mixed prompt) and pair with neither.

``--mode`` (part of the cell identity): ``mc`` (default) scores the log-likelihood of A, B, C and D
after the prompt (``longbench``: after ``The correct answer is (``, ctxbench's multiple-choice
reading of ``pred.py``'s answer format; ``lm-eval``: its own) in one prefill per letter sharing the
prompt's cache (the backend's ``scores``); ``generate`` (``longbench`` only) decodes up to 128
tokens and extracts the letter as ``pred.py`` does (the backend's ``answers``). Both backends serve
both calls. Per-trial ``score`` rows (right or wrong) are what paired verdicts pair.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ctxbench.errors import UserError, unknown
from ctxbench.parsing import split_list
from ctxbench.synthetic import longbench2 as lb
from ctxbench.synthetic.pieces import Prompt, encode
from ctxbench.tasks import thinking
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
    accuracy_rows,
    check_generation,
    check_trials,
    factors_for,
    generation_options,
    mode_note,
    most_trials,
    parse_chat,
    trial_cells,
    trials_options,
)
from ctxbench.tasks.generated import settle as _settle
from ctxbench.tasks.options import mode_of_chat, text_parser
from ctxbench.tasks.trials import ALL, decode_length, fewer_trials, numbered_trials, trials_said

MODES = ("mc", "generate")
TEMPLATES = ("longbench", "lm-eval")
LEGACY_TEMPLATE = "legacy"  # rows written before --template: the earlier mixed prompt, which neither reference gives
HINT = "give LongBench v2's items (THUDM/LongBench-v2) as JSON/JSONL with question, context, answer, length and choice_A..D or choices"


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/2, L
    variants: tuple[str, ...] = ()  # (): every bucket the data holds
    trials: int | str = ALL  # every item, as LongBench v2 reports
    max_trials: int = 50
    budget: float | None = None
    baseline: str | None = None
    chat: bool | None = None
    data: str | None = None
    mode: str = "mc"
    template: str = "longbench"
    prompt_mode: tuple[str, ...] | None = None  # onto chat (common.settle_mode)
    think_budget: int | None = None  # None: no budget (tasks.thinking); --mode generate only
    think_tags: tuple[str, str] | None = None


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


def _template(value) -> str:
    text = str(value).strip()
    if text not in TEMPLATES:
        raise unknown("--template", text, TEMPLATES)
    return text


OPTIONS = (
    Option("data", "LongBench v2's items: a local JSON/JSONL file (choice_A..D or a choices list) or a hub id "
           "(THUDM/LongBench-v2, read with datasets only when named). Required; its digest is on every row",
           text_parser("--data", 'data = "longbench2.jsonl"'),
           metavar="FILE|HUB_ID", identity=False),  # fmt: skip
    Option("variants", "length buckets: short, medium, long or all; default every bucket the data holds", _buckets,
           flag="--variant", identity=False),  # fmt: skip
    Option("template", "the reference: longbench (THUDM/LongBench pred.py: its prompt, middle truncation, --len counts the "
           "prompt's tokens only; default) or lm-eval (lm-evaluation-harness's longbench2: its prompt, ' A'-' D' after "
           "'Answer:', left truncation, raw text, --mode mc)", _template),  # fmt: skip
    Option("mode", "mc: log-likelihood of A/B/C/D after the prompt (prefill only); generate: decode and extract "
           "'The correct answer is (X)' as the official pred.py (--template longbench; default mc)", _mode),  # fmt: skip
    *trials_options("trials (trial t is the bucket's t-th item)", default=ALL),
    Option("chat", "wrap the prompt in the model's chat template (default: the model's template when its tokenizer ships one); "
           "--no-chat for raw prompts", parse_chat, is_flag=True, label=mode_of_chat),  # fmt: skip
    *generation_options(),
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
        import datasets  # optional: datasets only where it is used

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
    held = ", ".join(f"{b} {len(out[b])}" for b in lb.BUCKETS if b in out)
    for b in run:
        if b not in out:  # an empty bucket has no trials to run, whatever --trials says
            raise UserError(f"--data '{settings.data}' holds no {b} items (it holds: {held})",
                            f"drop {b} from --variant" + (f", e.g. --variant {','.join(x for x in run if x in out)}" if any(x in out for x in run) else ""))  # fmt: skip
        if settings.trials != ALL and len(out.get(b, [])) < most_trials(settings):
            raise UserError(f"{trials_said(settings)} is more than the {len(out[b])} {b} items of --data '{settings.data}'",
                            f"{fewer_trials(settings, len(out[b]))}, or drop {b} from --variant")  # fmt: skip
    return {b: out[b] for b in run}


def validate(settings: Settings) -> None:
    check_trials(settings, items=True)
    if settings.think_budget is not None and settings.mode != "generate":
        raise UserError(f"--think-budget bounds what a model generates, and --mode {settings.mode} scores the four letters without generating",
                        "add --mode generate, or drop --think-budget")  # fmt: skip
    check_generation(settings)
    if settings.template == "lm-eval" and settings.mode != "mc":
        raise UserError(f"--template lm-eval has no --mode {settings.mode}: lm-evaluation-harness's longbench2 is multiple choice by log-likelihood",
                        "drop --mode, or use --template longbench for pred.py's generation")  # fmt: skip
    if settings.template == "lm-eval" and settings.chat:
        raise UserError("--template lm-eval runs raw text, as lm-evaluation-harness's longbench2 does without --apply_chat_template",
                        "drop --chat, or use --template longbench (pred.py's chat prompt)")  # fmt: skip
    _by_bucket(items_of(settings.data), settings)


def items(settings: Settings) -> dict[str, int]:
    """{bucket: items} of the buckets that run (``--trials all`` runs each of them)."""
    return {b: len(v) for b, v in _by_bucket(items_of(settings.data), settings).items()}


def trials_of(settings: Settings, bucket: str) -> int:
    """The trials a cell of ``bucket`` runs: ``--trials N``, or every item of the bucket."""
    if settings.trials == ALL:
        return items(settings)[bucket]
    assert isinstance(settings.trials, int)  # (--trials auto: the runner runs batches of int trials)
    return settings.trials


def settle(lm, settings: Settings) -> Settings:
    """``chat`` left to the model: ``pred.py`` sends every prompt through the chat endpoint (the
    model's template when its tokenizer ships one); lm-eval's task runs raw text."""
    if settings.template == "lm-eval" and settings.chat is None and not settings.prompt_mode:
        return replace(settings, chat=False)
    return _settle(_CHAT, lm, settings)  # type: ignore[arg-type, return-value]  # duck-typed: it reads spec.chat and the chat fields both Settings have


def prepare(lm, settings: Settings) -> Context:
    items = items_of(settings.data)
    buckets = _by_bucket(items, settings)
    lengths = tuple(settings.lengths or default_lengths(lm.geometry.trained_len))
    digest = hashlib.sha256(json.dumps([[i.id, i.question, i.context, list(i.choices), i.answer, i.bucket] for i in items]).encode()).hexdigest()[:16]
    fields = {"task": "longbench2", "chat": settings.chat, "data": digest}
    assert settings.data is not None  # (validate requires --data; items_of read it above)
    name = Path(settings.data).name if Path(settings.data).expanduser().is_file() else settings.data
    if settings.chat and not getattr(lm.tokenizer, "chat_template", None):
        raise UserError("chat prompts need a tokenizer with a chat template and this one has none", "pass --no-chat for raw prompts")
    state = {"lengths": lengths, "buckets": buckets, "prompts": {}}
    return Context(dataset=f"longbench2:{name}" + ("-chat" if settings.chat else ""),
                   data_digest="sha256:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16],
                   notes=[f"{b}: {len(v)} items" for b, v in buckets.items()] + mode_note(lm, settings), state=state)  # fmt: skip


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
    steps = lb.MAX_NEW_TOKENS + thinking.reserve(settings) if settings.mode == "generate" else 0
    counts = items(settings) if settings.trials == ALL else {}
    buckets = list(counts) if settings.trials == ALL else settings.variants or lb.BUCKETS
    out = []
    for b in buckets:
        n = counts.get(b, 0) if settings.trials == ALL else most_trials(settings)
        for m in settings.methods:
            for _ in factors_for(m, settings.factors):
                out.append(CostItem(cells=len(lengths), forwards=tuple(lengths), counts=(n * (1 if steps else 4),) * len(lengths),
                                    decode_steps=len(lengths) * n * steps, what=f"{b} {m.label} ({n} items)", path=m.attention_path))  # fmt: skip
    return out


def _ids(tokenizer, text: str) -> list[int]:
    """``tokenizer.encode(text)`` as both references call it: the tokenizer's own special tokens (BOS where it adds one)."""
    return list(tokenizer(text)["input_ids"])


def _chat_ids(tokenizer, text: str, after: str = "") -> list[int]:
    """``text`` as the user's message of the model's chat template, the generation prompt and
    ``after`` appended, tokenised as ``apply_chat_template`` tokenises (no special tokens added:
    the template writes its own)."""
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return encode(tokenizer, rendered + after)


def build(tokenizer, chat: bool, item: lb.Item, length: int, mode: str, template: str = "longbench") -> Prompt:
    """Trial ``item``'s prompt at ``length`` under ``template``'s reference (the module docstring)."""
    if template == "lm-eval":
        return _build_lmeval(tokenizer, item, length)
    ids = _ids(tokenizer, lb.prompt_text(item))  # pred.py: tokenizer.encode(prompt), BOS counted
    if length < 2:
        raise UserError(f"length {length} is too short for longbench2", "use --len of at least 64")
    kept, cut = lb.truncate_middle(ids, length)
    text = tokenizer.decode(kept, skip_special_tokens=True) if cut else lb.prompt_text(item)  # pred.py decodes a cut prompt
    after = lb.MC_PREFIX if mode == "mc" else ""
    if chat:
        out = _chat_ids(tokenizer, text, after)
    else:  # what pred.py sends, the answer prefix on a line of its own after it (mc)
        out = _ids(tokenizer, text + (lb.RAW_GLUE + after if after else ""))
    choices = tuple((tuple(out), tuple(encode(tokenizer, x))) for x in lb.LETTERS) if mode == "mc" else ()
    return Prompt(tuple(out), (item.answer,), lb.MAX_NEW_TOKENS, choices=choices,
                  extra={"id": item.id, "truncated": cut, "prompt_tokens": len(ids), "template": template})  # fmt: skip


def _build_lmeval(tokenizer, item: lb.Item, length: int) -> Prompt:
    """lm-eval's request per letter: ``_encode_pair(doc_to_text, " X")``, then the left truncation
    to ``max_length`` = ``length``."""
    context = lb.lmeval_text(item)
    context_ids = _ids(tokenizer, context)
    choices, cut = [], 0
    for x in lb.LETTERS:
        whole = _ids(tokenizer, context + lb.LMEVAL_DELIMITER + x)
        continuation = whole[len(context_ids):]
        prefix, cut_x = lb.truncate_left(context_ids, continuation, length)
        choices.append((tuple(prefix), tuple(continuation)))
        cut = max(cut, cut_x)
    return Prompt(choices[0][0], (item.answer,), 1, choices=tuple(choices),
                  extra={"id": item.id, "truncated": cut, "prompt_tokens": len(context_ids), "template": "lm-eval"})  # fmt: skip


def prompts_for(lm, ctx: Context, settings: Settings, cell: Cell) -> list[Prompt]:
    cache = ctx.state["prompts"]
    out = []
    for t in range(trials_of(settings, cell.variant)):
        key = (cell.variant, cell.length, settings.mode, settings.template, t)
        if key not in cache:
            cache[key] = build(thinking.prompt_tokenizer(lm.tokenizer, settings), bool(settings.chat), ctx.state["buckets"][cell.variant][t],
                               thinking.room(settings, cell.length), settings.mode, settings.template)  # fmt: skip
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

        results = trial_cells(lm, ctx, prompts, lb.MAX_NEW_TOKENS, measure, think=thinking.thinking_of(tok, settings),
                              mode=mode_of_chat(settings.chat))  # fmt: skip
    else:
        results = _mc_cells(lm, ctx, prompts)
    for cell, rows in results:
        yield cell, rows + accuracy_rows([r.value for r in rows], sum(r.tokens for r in rows), sum(r.seconds for r in rows),
                                         **thinking.outcomes(rows))  # fmt: skip


def _mc_cells(lm, ctx: Context, prompts: dict):
    """Each trial's four letters scored after its prompt (one shared prefix per trial); trials the
    results file holds are kept (``ctx.kept``)."""
    kept = getattr(ctx, "kept", None) or {}
    owner = [(cell, t, k) for cell, ps in prompts.items() for t in range(len(ps)) if t not in kept.get(cell, {}) for k in range(4)]
    nll: dict = {}
    seconds: dict = {}
    first = next(iter(prompts))
    if owner:
        flat = [prompts[c][t].choices[k][0] for c, t, k in owner]
        longest = max(len(prompts[c][t].choices[k][0]) + len(prompts[c][t].choices[k][1]) for c, t, k in owner)
        with lm.session(first.method, first.factor or 1.0, max(decode_length(first, [prompts[c][t] for c, t, _ in owner], 1), longest)) as engine:
            for s in engine.scores(flat, [prompts[c][t].choices[k][1] for c, t, k in owner], share=first.method.causal):
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


REFERENCES = (
    Reference("template", "longbench", "THUDM/LongBench `pred.py`, `prompts/0shot.txt`", "commit 2e00731 (2025-01-15)",
              "the prompt text (`0shot.txt`, `pred.py`'s `replace` calls); the prompt's tokens (`tokenizer.encode`, BOS counted) cut "
              "to `--len` in the middle (`ids[:n//2] + ids[-n//2:]`) and decoded; the chat template around the decoded text; "
              "`extract_answer` (`--mode generate`, 128 new tokens); every item (`--trials all`). Token-exact in tests",
              "`pred.py` only generates, sampling at temperature 0.1 through an API server; ctxbench decodes greedily, and "
              "`--mode mc` (the default) scores A-D after `The correct answer is (`, an answer prefix of ctxbench's "
              "(on a new line under `--no-chat`). The server's context limit is not modelled: `--len` counts the prompt only",
              "`--mode generate` (the model's chat template is used by default, as `pred.py` sends chat messages)", default=True),
    Reference("template", "lm-eval", "EleutherAI/lm-evaluation-harness `lm_eval/tasks/longbench2/_longbench_common_yaml`, "
              "`TemplateLM._encode_pair`, `HFLM._loglikelihood_tokens`", "0.4.13.dev0, commit 4e7e0d4 (2026-08-21; the task unchanged since ad506a1, 2025-10-14)",
              "`doc_to_text` (context and choices unstripped, question stripped, `Answer:` last); continuations ` A`-` D`; "
              "the pair encoded whole and split; the last `--len`+1 tokens kept (left truncation), raw text; the most likely "
              "letter (`acc`). Token-exact in tests",
              "lm-eval reads the hub's `recursal/longbench-v2` (a `choices` list); ctxbench reads your file in either layout. "
              "lm-eval's `acc` is over the whole set; ctxbench reports each length bucket",
              "`--template lm-eval` (raw text, `--mode mc`; `--len` is lm-eval's `max_length`)"),
)

TASK: Task = Task(
    name="longbench2", help="LongBench v2 multiple choice over your copy of the items (--data FILE|HUB_ID): by log-likelihood "
    "of A-D (--mode mc) or generation (--mode generate), x length buckets x lengths (middle truncation) x methods.",
    settings=Settings, options=OPTIONS, prepare=prepare, cells=cells, groups=groups, run_group=run_group, cost=cost,
    metric="accuracy", higher_is_better=True, fraction=True, default_lengths=default_lengths, validate=validate,
    settle=settle, trials=numbered_trials, domains={"accuracy": FRACTION, "score": OUTCOME},
    legacy_options=lambda record: {**TASK.default_identity(), "template": LEGACY_TEMPLATE}, items=items,
    references=REFERENCES,
)  # fmt: skip


class _Chat:
    chat = "model"


_CHAT = _Chat()
