"""Passkey retrieval (the landmark-attention prompt used by the
YaRN and LongRoPE evaluations).

Prompt, lines joined by newlines: the instruction, filler sentences, the needle line
"The pass key is N. Remember it. N is the pass key." at the requested depth of the filler, more
filler, then "What is the pass key? The pass key is". The filler is sized in tokens (the prompt
is assembled from separately tokenised pieces), so the prompt has exactly the requested length
whenever the fixed text fits. Keys are random ``digits``-digit integers from a generator seeded
by (seed, length, depth, trial) — the same keys for every method. Greedy decoding, at most
``max_new_tokens`` (10) tokens; a trial passes when the first integer in the answer equals N.

Speed: everything before the key is identical for all trials of a (length, depth) cell, so the
prefix's KV cache is computed once per cell and reused by every trial; the prefixes of the depths
of one length are themselves prefixes of one instruction-and-filler stream, so one running cache
is extended from the shallowest needle to the deepest; trials whose suffixes have the same token
count are decoded as one batch.

``--metrics answer_nll`` adds the teacher-forced NLL of the key's tokens after the prompt
(:mod:`ctxbench.tasks.proxy`), per trial in ``extra.answer_nll`` and per cell with an interval.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ctxbench.errors import UserError
from ctxbench.tasks import proxy, thinking, trials
from ctxbench.tasks.base import FRACTION, OUTCOME, Cell, Context, CostItem, Measurement, Option, Task
from ctxbench.tasks.common import (
    accuracy_rows,
    check_generation,
    check_trials,
    depths_option,
    factors_for,
    generation_options,
    mode_note,
    most_trials,
    parse_bool,
    parse_positive_int,
    settle_mode,
    shared_prefix_cost,
    trial_cells,
    trials_options,
)
from ctxbench.tasks.options import mode_of_chat
from ctxbench.tasks.plots import depth_heatmaps

NAME = "passkey"
INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. "
    "Find it and memorize them. I will quiz you about the important information there."
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE_HEAD = "The pass key is"
NEEDLE_TAIL = ". Remember it. {key} is the pass key."
QUESTION = "What is the pass key?"
ANSWER_START = "The pass key is"
TEMPLATE_DIGEST = "sha256:" + hashlib.sha256("\n".join([INSTRUCTION, FILLER, NEEDLE_HEAD, NEEDLE_TAIL, QUESTION, ANSWER_START]).encode()).hexdigest()[:16]
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Settings:
    methods: tuple
    factors: tuple[float, ...]
    lengths: tuple[int, ...] | None = None  # None: L/2, L, 2L
    depths: tuple[float, ...] = DEFAULT_DEPTHS
    trials: int | str = 4  # or "auto" (the runner then runs batches of int trials)
    max_trials: int = 50
    budget: float | None = None
    baseline: str | None = None
    digits: int = 5
    chat: bool = False
    metrics: tuple[str, ...] = ()  # proxy metrics beyond accuracy: answer_nll (ctxbench.tasks.proxy)
    max_new_tokens: int = 10
    prompt_mode: tuple[str, ...] | None = None  # onto chat (common.settle_mode; auto: raw, the protocol's)
    think_budget: int | None = None  # None: no budget (tasks.thinking)
    think_tags: tuple[str, str] | None = None


OPTIONS = (
    depths_option("N evenly spaced depths in [0, 1] (e.g. 5), or a comma list of depths (0.1,0.5,0.9); default 5"),
    *trials_options("trials (random keys), per length and depth,"),
    Option("digits", "digits of the pass key (default 5)", lambda v: _digits(v)),  # changes every key: part of the key
    Option("chat", "wrap the prompt in the model's chat template (default: raw)", lambda v: parse_bool(v, "--chat"), is_flag=True,
           label=mode_of_chat),
    proxy.metrics_option(proxy.ANSWER_METRICS, "answer_nll = teacher-forced mean NLL of the key's tokens after the prompt, "
                         "no decoding"),
    *generation_options(),
)


def legacy_options(record: dict) -> dict:
    """Rows from before options were part of the cell key: a chat run is told by its dataset
    (``passkey-chat``); ``--digits`` was not recorded, so those rows read as the default 5."""
    return {"digits": 5, "chat": record.get("dataset", "").endswith("-chat")}


def _digits(value) -> int:
    n = parse_positive_int(value, "--digits")
    if n > 20:
        raise UserError(f"--digits {n} must be between 1 and 20", "the protocol uses 5")
    return n


@dataclass(frozen=True)
class PasskeyPrompt:
    """Token ids of one passkey prompt; ``ids[:prefix_len]`` is the same for every key. Not the
    other tasks' :class:`ctxbench.synthetic.pieces.Prompt`: it carries where the key sits, which
    the answer and the shared prefixes are read from, and no answer text or scorer."""

    ids: tuple[int, ...]
    key: int
    key_span: tuple[int, int]  # [start, end) of the key's tokens in the needle line
    prefix_len: int
    # ids[:shared_len] (instruction + filler up to the needle line) is the start of the same token
    # stream for every depth and key of a length, so depths can extend one running KV cache
    shared_len: int = 0

    @property
    def needle_pos(self) -> int:
        return self.key_span[0]

    @property
    def depth(self) -> float:
        return self.key_span[0] / len(self.ids)


def validate(settings: Settings) -> None:
    check_trials(settings)
    check_generation(settings, settings.max_new_tokens, default_chat=False)
    if not 1 <= settings.digits <= 20:
        raise UserError(f"--digits {settings.digits} must be between 1 and 20", "the protocol uses 5")
    if settings.max_new_tokens < 1:
        raise UserError(f"max_new_tokens {settings.max_new_tokens} must be >= 1", "the protocol uses 10")
    for d in settings.depths or []:
        if not 0 <= d <= 1:
            raise UserError(f"depth {d} is outside [0, 1]", "0 puts the key at the start of the filler, 1 at its end")


def default_lengths(trained_len: int) -> list[int]:
    return [trained_len // 2, trained_len, 2 * trained_len]


def draw_key(seed: int, length: int, depth: float, trial: int, digits: int) -> int:
    """A ``digits``-digit key (no leading zero), the same for every method."""
    rng = random.Random(f"passkey|{seed}|{length}|{depth!r}|{trial}")
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def first_integer(text: str) -> int | None:
    """The first run of digits in ``text`` as an integer (``"012345"`` -> 12345), or None."""
    match = re.search(r"\d+", text)
    return int(match.group()) if match else None


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _frame(tokenizer, chat: bool) -> tuple[list[int], list[int]]:
    """Tokens before the instruction and after the question (BOS; chat template parts)."""
    bos = [tokenizer.bos_token_id] if _adds_bos(tokenizer) else []
    if not chat:
        return bos, _encode(tokenizer, "\n" + QUESTION + " " + ANSWER_START)
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("--chat needs a tokenizer with a chat template and this one has none", "drop --chat (raw prompts)")
    marker = "\u2063CTXBENCH\u2063"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True)
    head, tail = text.split(marker)
    return _encode(tokenizer, head), _encode(tokenizer, "\n" + QUESTION + tail + ANSWER_START)


def _adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


def _sentences(tokenizer) -> list[list[int]]:
    parts = [s.strip() + "." for s in FILLER.split(".") if s.strip()]
    return [_encode(tokenizer, s + " ") for s in parts]


def _filler(sentences: list[list[int]], count: int) -> tuple[list[int], list[int]]:
    """``count`` filler tokens cycling through the sentences, and the sentence-boundary offsets."""
    out: list[int] = []
    bounds = [0]
    i = 0
    while len(out) < count:
        out += sentences[i % len(sentences)]
        bounds.append(len(out))
        i += 1
    return out[:count], sorted({b for b in bounds if b <= count} | {count})


def fixed_tokens(tokenizer, digits: int = 5, chat: bool = False) -> int:
    """Tokens of the prompt that are not filler (for the shortest valid length)."""
    key = 10 ** (digits - 1)
    head, tail = _frame(tokenizer, chat)
    needle = _encode(tokenizer, "\n" + NEEDLE_HEAD) + _encode(tokenizer, f" {key}") + _encode(tokenizer, NEEDLE_TAIL.format(key=key) + "\n")
    return len(head) + len(_encode(tokenizer, INSTRUCTION + "\n")) + len(needle) + len(tail)


def build_prompt(tokenizer, length: int, depth: float, key: int, chat: bool = False, filler=None) -> PasskeyPrompt:
    """A passkey prompt of ``length`` tokens with the key at ``depth`` of the filler.

    Pieces are tokenised separately and concatenated, so the filler can be sized to the token
    and everything before the key is the same for every key. The needle is placed at the filler
    sentence boundary nearest to ``depth``. ``filler``: token ids to fill with instead of the
    protocol's sentences (a document: ``ctxbench tune``'s needle objective), cut to fit, the needle
    at the token nearest ``depth``.
    """
    if not 0 <= depth <= 1:
        raise UserError(f"depth {depth} is outside [0, 1]", "0 puts the key at the start of the filler, 1 at its end")
    head, tail = _frame(tokenizer, chat)
    intro = head + _encode(tokenizer, INSTRUCTION + "\n")
    needle_head = _encode(tokenizer, "\n" + NEEDLE_HEAD)
    key_ids = _encode(tokenizer, f" {key}")
    needle_tail = _encode(tokenizer, NEEDLE_TAIL.format(key=key) + "\n")
    fixed = len(intro) + len(needle_head) + len(key_ids) + len(needle_tail) + len(tail)
    room = length - fixed
    if room < 0:
        raise UserError(
            f"length {length} is shorter than the passkey prompt's fixed text ({fixed} tokens)",
            f"use --len of at least {fixed + 1} (e.g. 1k)",
        )
    bounds: Sequence[int]  # where the key may go: sentence boundaries, or every token of a given filler
    if filler is None:
        filler, bounds = _filler(_sentences(tokenizer), room)
    else:
        filler = list(filler[:room])
        bounds = range(len(filler) + 1)
    split = min(bounds, key=lambda b: abs(b - depth * room))
    before = intro + filler[:split] + needle_head
    ids = before + key_ids + needle_tail + filler[split:] + tail
    start = len(before)
    return PasskeyPrompt(ids=tuple(ids), key=key, key_span=(start, start + len(key_ids)), prefix_len=start, shared_len=len(intro) + split)


def prepare(lm, settings: Settings) -> Context:
    lengths = settings.lengths or tuple(default_lengths(lm.geometry.trained_len))
    need = fixed_tokens(thinking.prompt_tokenizer(lm.tokenizer, settings), settings.digits, settings.chat) + 1
    short = [n for n in lengths if thinking.room(settings, n) < need]
    if short and thinking.reserve(settings):
        raise thinking.too_short(settings, short[0], need)
    if short:
        raise UserError(
            f"length {short[0]} is shorter than the passkey prompt's fixed text ({need - 1} tokens)",
            f"use --len of at least {need} (e.g. 1k)",
        )
    return Context(dataset="passkey" + ("-chat" if settings.chat else ""), data_digest=TEMPLATE_DIGEST, notes=mode_note(lm, settings),
                   state=lengths)  # fmt: skip


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    return [
        Cell(NAME, m, f, n, depth=d)
        for m in settings.methods
        for f in factors_for(m, settings.factors)
        for n in ctx.state
        for d in settings.depths
    ]


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    """The depths of one (method, factor, length) run together: their prompts start with the same
    instruction and filler, so one running KV cache serves them all (ctxbench.model.decoding)."""
    out: dict[tuple, list[Cell]] = {}
    for cell in todo:
        out.setdefault((cell.method, cell.factor, cell.length), []).append(cell)
    return list(out.values())


def cost(settings: Settings, trained_len: int) -> list[CostItem]:
    """The filler once per length, then per trial the part after its needle (half a prompt on
    average) and the decoding steps."""
    lengths = settings.lengths or default_lengths(trained_len)
    items = []
    for m in settings.methods:
        for f in factors_for(m, settings.factors):
            forwards, cached, counts = shared_prefix_cost(lengths, settings.depths, most_trials(settings), share=m.causal)
            steps = len(lengths) * len(settings.depths) * most_trials(settings) * (settings.max_new_tokens + thinking.reserve(settings))
            items.append(CostItem(cells=len(lengths) * len(settings.depths), forwards=forwards, decode_steps=steps, cached=cached,
                                  counts=counts, what=f"{m.label} x{f:g}" if f else m.label, path=m.attention_path))  # fmt: skip
            if settings.metrics and not m.causal:  # scored in the trials' prefills, but for a non-causal method
                items.append(CostItem(cells=0, forwards=forwards, cached=cached, counts=counts, what=f"{m.label} answer_nll", path=m.attention_path))
    return items


def run_group(lm, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    """The depths of one (method, factor, length): every trial's prompt, decoded with the shared
    instruction-and-filler stream computed once (:func:`ctxbench.model.decoding.decode_shared`); a
    cell is yielded as soon as all its trials are answered."""
    tok, built = lm.tokenizer, thinking.prompt_tokenizer(lm.tokenizer, settings)
    n_trials = settings.trials
    assert isinstance(n_trials, int)  # (--trials auto: the runner runs batches of int trials)
    prompts = {
        cell: [build_prompt(built, thinking.room(settings, cell.length), _depth(cell), draw_key(ctx.seed, cell.length, _depth(cell), t, settings.digits),
                            settings.chat)
               for t in range(n_trials)]
        for cell in group
    }  # fmt: skip
    def measure(t, p, new, seconds) -> Measurement:
        text = tok.decode(list(new), skip_special_tokens=True)
        return Measurement("correct", int(first_integer(text) == p.key), trial=t, answer=text.strip(), tokens=len(p.ids),
                           seconds=round(seconds, 4), extra={"key": p.key, "needle_pos": p.needle_pos, "needle_depth": round(p.depth, 4)})  # fmt: skip

    # the key scored in each decoded trial's own prefill; before decoding, the trials that cannot be
    scored = trials.answer_nlls(lm, ctx, prompts, answer_ids, settings.max_new_tokens) if settings.metrics else {}
    scoring = answer_ids if settings.metrics else None
    for cell, rows in trial_cells(lm, ctx, prompts, settings.max_new_tokens, measure, continuation=scoring,
                                  think=thinking.thinking_of(tok, settings), mode=mode_of_chat(settings.chat)):  # fmt: skip
        # one ``correct`` row per trial and the cell's ``accuracy`` with its trial count
        extra = []
        if settings.metrics:
            rows = trials.with_answer_nll(rows, scored[cell])
            extra = trials.answer_nll_rows(rows, sum(v[2] for v in scored[cell].values()))
        yield cell, rows + accuracy_rows([int(r.value) for r in rows], sum(r.tokens for r in rows), sum(r.seconds for r in rows),
                                         **thinking.outcomes(rows)) + extra  # fmt: skip


def _depth(cell: Cell) -> float:
    """A passkey cell's depth (its grid is depths x lengths: every cell has one)."""
    assert cell.depth is not None
    return cell.depth


def prompt_ids(lm, ctx: Context, settings: Settings, cell: Cell, trial: int) -> tuple[int, ...]:
    """Trial ``trial``'s prompt in ``cell``, as :func:`run_group` builds it (``ctxbench show-prompt``)."""
    key = draw_key(ctx.seed, cell.length, _depth(cell), trial, settings.digits)
    return build_prompt(thinking.prompt_tokenizer(lm.tokenizer, settings), thinking.room(settings, cell.length), _depth(cell), key,
                        settings.chat).ids  # fmt: skip


def answer_ids(prompt: PasskeyPrompt) -> tuple[int, ...]:
    """The expected answer's tokens: the key as the needle line spells it (`` N``), which is also
    how it follows "The pass key is" at the prompt's end."""
    return prompt.ids[prompt.key_span[0] : prompt.key_span[1]]


def plots(records, directory):

    return depth_heatmaps(records, directory, NAME, "correct")


TASK = Task(
    name=NAME,
    help="Passkey retrieval over lengths x depths x methods (the YaRN/LongRoPE evaluation prompt).",
    settings=Settings,
    options=OPTIONS,
    prepare=prepare,
    cells=cells,
    groups=groups,
    run_group=run_group,
    cost=cost,
    metric="accuracy",
    higher_is_better=True,
    fraction=True,
    default_lengths=default_lengths,
    plots=plots,
    validate=validate,
    trials=trials.numbered_trials,
    legacy_options=legacy_options,
    prompt=prompt_ids,
    settle=lambda lm, settings: thinking.settle(lm, settle_mode(settings, default_chat=False)),
    domains={"accuracy": FRACTION, "correct": OUTCOME, **proxy.ANSWER_DOMAINS},  # a trial is right or wrong
)
