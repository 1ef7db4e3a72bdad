"""Small helpers task modules share: option parsers (the depths option among them), the factor
axis of a method, accuracy rows and shared-prefix decoding."""

from __future__ import annotations

from ..errors import UserError, closest


def factors_for(method, factors) -> list[float | None]:
    """The factors a method runs at: all of them, or ``[None]`` (once) when it ignores the factor.
    Rows of such a cell have an empty ``factor``; tables show them beside every factor."""
    return list(factors) if method.uses_factor else [None]


def shared_prefix_forwards(lengths, depths, trials: int, share: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(forwards, cached) for plans of a task whose trials share everything before their needle:
    one running prefix per length up to the deepest needle, then each trial's suffix after its
    needle's depth, attending to the ``n * d`` tokens cached before it. ``share=False`` (a method
    that is not causal, ``MethodSetting.causal``): every trial's whole prompt, nothing cached."""
    if not share:
        return tuple(n for n in lengths for _ in depths for _ in range(trials)), (0,) * (len(lengths) * len(depths) * trials)
    suffixes = [(max(1, int(n * (1 - d))), n) for n in lengths for d in depths for _ in range(trials)]
    forwards = tuple(max(1, int(n * max(depths))) for n in lengths) + tuple(s for s, _ in suffixes)
    return forwards, (0,) * len(lengths) + tuple(n - s for s, n in suffixes)


def parse_positive_int(value, flag: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UserError(f"{flag} '{value}' is not a whole number", f"pass e.g. {flag} 4") from None
    if number < 1:
        raise UserError(f"{flag} {number} must be >= 1", f"pass e.g. {flag} 4")
    return number


def parse_choice(value, flag: str, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        guess = closest(text, choices)
        raise UserError(f"unknown {flag} '{value}'", (f"did you mean '{guess}'? " if guess else "") + f"choose one of: {', '.join(choices)}")
    return text


def parse_bool(value, flag: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise UserError(f"{flag} '{value}' is not true or false", f"pass {flag} true or {flag} false")


CHAT_HELP = ("wrap the prompt in the model's chat template; default: under --protocol ruler the model's own template "
             "when its tokenizer ships one (RULER runs chat models through their template), raw otherwise; "
             "--no-chat for raw prompts")


def parse_chat(value) -> bool | None:
    """``--chat``/``--no-chat``, a suite's ``chat = true|false``, or ``"auto"`` (the default: decided
    by :func:`settle_chat` once the model is loaded)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return parse_bool(value, "--chat")


def settle_chat(lm, settings):
    """``chat`` left to the model (``None``): the model's chat template under RULER's protocol when
    its tokenizer ships one, as RULER prompts chat models (its ``template.py`` has one per model
    family and ``base`` for base models); raw prompts under ``exact``, as every run before."""
    from dataclasses import replace

    if settings.chat is not None:
        return settings
    ships = bool(getattr(lm.tokenizer, "chat_template", None))
    return replace(settings, chat=settings.protocol == "ruler" and ships)


AUTO = "auto"
TRIAL_BATCH = 10  # --trials auto adds trials in batches of this many


def parse_trials(value) -> int | str:
    """``--trials N`` or ``--trials auto`` (trials until the paired comparisons are decided)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    return parse_positive_int(value, "--trials")


def trials_options(what: str, default: int = 4) -> list:
    """The options of a task that counts trials: ``--trials N|auto`` and what bounds ``auto``.
    None is part of a cell's identity: resume handles the count (a cell holding fewer trials
    than asked gets the missing ones), and the others only decide how many trials run."""
    from .base import Option

    return [
        Option("trials", f"{what} per cell (default {default}); auto: batches of {TRIAL_BATCH} until every paired comparison "
               "with --baseline (or with the best method at that length) is separated at 5% after Holm or equivalent within "
               "10 points, up to --max-trials", parse_trials, identity=False),  # fmt: skip
        Option("max_trials", "with --trials auto: the most trials per cell (default 50)", lambda v: parse_positive_int(v, "--max-trials"),
               identity=False),  # fmt: skip
        Option("budget", "with --trials auto: minutes after which no new batch starts (default: none)", _parse_minutes, identity=False),
        Option("baseline", "with --trials auto: the method label every other is compared with (default: the best at each length)",
               identity=False),  # fmt: skip
    ]


def _parse_minutes(value) -> float:
    try:
        minutes = float(str(value).strip())
    except ValueError:
        raise UserError(f"--budget '{value}' is not a number of minutes", "pass e.g. --budget 30") from None
    if not minutes > 0 or minutes == float("inf"):
        raise UserError(f"--budget {value} must be a positive number of minutes", "pass e.g. --budget 30")
    return minutes


def check_trials(settings) -> None:
    """The trial options agree (before any model loads)."""
    auto = settings.trials == AUTO
    if not auto and (not isinstance(settings.trials, int) or isinstance(settings.trials, bool) or settings.trials < 1):
        raise UserError(f"--trials {settings.trials} must be a whole number >= 1 or auto", "pass e.g. --trials 10")
    for name, flag in (("budget", "--budget"), ("baseline", "--baseline")):
        if getattr(settings, name) is not None and not auto:
            raise UserError(f"{flag} bounds --trials auto, and --trials is {settings.trials}", f"add --trials auto, or drop {flag}")
    if settings.max_trials != 50 and not auto:
        raise UserError(f"--max-trials bounds --trials auto, and --trials is {settings.trials}", "add --trials auto, or drop --max-trials")
    if auto and settings.max_trials < TRIAL_BATCH:
        raise UserError(f"--max-trials {settings.max_trials} is below one batch of {TRIAL_BATCH} trials", f"pass --max-trials {TRIAL_BATCH} or more")
    if settings.baseline is not None:
        labels = [m.label for m in settings.methods]
        if settings.baseline not in labels:
            from ..errors import unknown

            raise unknown("--baseline label", settings.baseline, labels)


def most_trials(settings) -> int:
    """The trials a cell can run: ``--trials``, or ``--max-trials`` under ``auto`` (plans say the most it can cost)."""
    return settings.max_trials if settings.trials == AUTO else settings.trials


def trial_cells(lm, ctx, prompts_by_cell: dict, max_new_tokens: int, measure, finished=None, continuation=None):
    """:func:`answer_cells` for the trials a cell does not hold yet: yields ``(cell, [per-trial
    Measurement, ...])`` in trial order. ``measure(trial, prompt, new_tokens, seconds)`` makes a
    trial's row; a trial the results file already holds (``ctx.kept[cell][t]``, from a run with
    fewer trials: trial t's prompt is drawn from t alone, so it would come out the same) is
    reused, not decoded again, so raising ``--trials`` costs only the new trials.
    ``continuation(prompt) -> ids``: the expected answer, scored in each decoded trial's own prefill
    under a causal method (:func:`answer_cells`); its row carries ``extra.answer_nll`` (mean NLL per
    token) and ``extra.answer_tokens``. Rows without them (kept trials, a method that is not causal)
    are for :func:`ctxbench.tasks.proxy.answer_nlls`, which scores them before decoding."""
    from .proxy import with_answer_nll

    kept = getattr(ctx, "kept", None) or {}
    todo, index = {}, {}
    for cell, prompts in prompts_by_cell.items():
        ts = [t for t in range(len(prompts)) if t not in kept.get(cell, {})]
        if ts:
            todo[cell], index[cell] = [prompts[t] for t in ts], ts

    def whole(cell, new: dict) -> list:
        return [new[t] if t in new else kept[cell][t] for t in range(len(prompts_by_cell[cell]))]

    for cell in prompts_by_cell:
        if cell not in todo:
            yield cell, whole(cell, {})
    if todo:
        for cell, answers in answer_cells(lm, todo, max_new_tokens, finished, continuation):
            rows = [measure(t, p, new, s) for t, (p, new, s, *_) in zip(index[cell], answers, strict=True)]
            if continuation is not None:
                scored = {t: (float(a[3].double().mean()), int(a[3].numel()), 0.0)
                          for t, a in zip(index[cell], answers, strict=True) if a[3] is not None}  # fmt: skip
                rows = with_answer_nll(rows, scored)
            yield cell, whole(cell, dict(zip(index[cell], rows, strict=True)))


def accuracy_rows(scores: list[float], tokens: int, seconds: float, **extra) -> list:
    """A cell's ``accuracy`` (mean per-trial score) with its trial count, and its 95% Wilson
    interval as ``accuracy_lo``/``accuracy_hi`` rows (for fractional scores, RULER's
    string_match_all, the interval treats the summed score as the count of successes)."""
    from ..stats import wilson
    from .base import Measurement

    n = len(scores)
    total = float(sum(scores))
    lo, hi = wilson(round(total), n) if n else (float("nan"), float("nan"))
    info = {"trials": n, "correct": total, **extra}
    agg = dict(trial="all", tokens=tokens)
    return [
        Measurement("accuracy", total / n, seconds=round(seconds, 4), extra=info, **agg),
        Measurement("accuracy_lo", lo, extra={"interval": "95% Wilson"}, **agg),
        Measurement("accuracy_hi", hi, extra={"interval": "95% Wilson"}, **agg),
    ]


def answer_cells(lm, prompts_by_cell: dict, max_new_tokens: int, finished=None, continuation=None):
    """Greedy answers of every cell's trial prompts (``{cell: [prompt, ...]}``, prompts with
    ``.ids``), all cells of one (method, factor, length) decoded together with their shared
    prefixes computed once (:func:`ctxbench.decoding.decode_shared`; each prompt whole under a method
    that is not causal, ``ms-poe``). Yields ``(cell, [(prompt,
    new_tokens, seconds), ...])`` in trial order as soon as all of a cell's trials are answered.
    Dynamic methods see the cell's length as theirs, or the longest prompt plus the new tokens where
    that is longer (a prompt of exactly the length decodes past it): one value per cell, whichever
    trials run, so a trial scores the same in a run of 10 trials as of 50. ``finished(prompt,
    new_tokens)``: the trial's score can no longer change, so its decoding may stop early.
    ``continuation(prompt) -> ids``: each entry is ``(prompt, new_tokens, seconds, nll)``, ``nll``
    the (k,) NLL of the expected answer scored in the prompt's own prefill (no second prefill), or
    None under a method that is not causal, whose prompt and answer cannot share a forward."""
    from ..decoding import decode_shared, stop_tokens
    from ..patching import applied

    first = next(iter(prompts_by_cell))
    assert all((c.method, c.factor, c.length) == (first.method, first.factor, first.length) for c in prompts_by_cell)
    owner = [(cell, t) for cell, prompts in prompts_by_cell.items() for t in range(len(prompts))]
    flat = [prompts_by_cell[cell][t] for cell, t in owner]
    seq_len = decode_length(first, flat, max_new_tokens)
    pending = {cell: len(prompts) for cell, prompts in prompts_by_cell.items()}
    done: dict = {}
    scored = continuation is not None and first.method.causal
    conts = [list(continuation(p)) for p in flat] if scored else None
    with applied(lm.model, lm.geometry, first.method, first.factor or 1.0, seq_len):
        stop = None if finished is None else (lambda i, new: finished(flat[i], new))
        for a in decode_shared(lm.model, [p.ids for p in flat], max_new_tokens, stop_tokens(lm.model, lm.tokenizer), finished=stop,
                               share=first.method.causal, continuations=conts):  # fmt: skip
            cell, t = owner[a.index]
            done[(cell, t)] = (flat[a.index], a.tokens, a.seconds) + ((a.nll,) if continuation is not None else ())
            pending[cell] -= 1
            if pending[cell] == 0:
                yield cell, [done[(cell, i)] for i in range(len(prompts_by_cell[cell]))]


def decode_length(cell, prompts: list, max_new_tokens: int) -> int:
    """The sequence length a dynamic method is applied for when ``prompts`` of ``cell``'s group are
    answered: the cell's length, or the longest prompt plus its new tokens where that is longer."""
    return max(cell.length, max(len(p.ids) for p in prompts) + max_new_tokens)


def parse_depths(depths: int | None = None, depth: str | None = None) -> list[float]:
    """``depths`` N evenly spaced in [0, 1], or ``depth`` an explicit comma list (``0.1,0.5``);
    default 5 depths (0, 0.25, 0.5, 0.75, 1)."""
    if depths is not None and depth is not None:
        raise UserError("give --depths N or --depth LIST, not both", "e.g. --depths 5 or --depths 0.1,0.5,0.9")
    if depth is not None:
        values = []
        for part in str(depth).split(","):
            try:
                value = float(part)
            except ValueError:
                raise UserError(f"bad depth '{part}': not a number", "depths are fractions in [0, 1], e.g. 0.5") from None
            if not 0.0 <= value <= 1.0 or value != value:
                raise UserError(f"depth {part} is outside [0, 1]", "0 puts the needle at the start of the haystack, 1 at its end")
            values.append(value)
        if len(set(values)) != len(values):
            raise UserError(f"a depth is given twice in '{depth}'", "list each depth once")
        return sorted(values)
    n = 5 if depths is None else depths
    if n < 1:
        raise UserError(f"--depths {n} must be >= 1", "e.g. --depths 5 for 0, 0.25, 0.5, 0.75, 1")
    return [0.5] if n == 1 else [round(i / (n - 1), 4) for i in range(n)]


def parse_depths_option(value) -> tuple[float, ...]:
    """``--depths 5`` (N evenly spaced) or ``--depths 0.1,0.5`` (a list; also a TOML list)."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise UserError("empty list of depths", "give at least one depth, e.g. [0.5]")
        return tuple(parse_depths(None, ",".join(map(str, value))))
    text = str(value).strip()
    if "," in text or "." in text:
        return tuple(parse_depths(None, text))
    return tuple(parse_depths(parse_positive_int(text, "--depths"), None))


def _explicit_depths(value) -> tuple[float, ...]:
    """``--depth 0.1,0.5`` as the first release read it: always an explicit list (``--depth 1`` is depth 1.0)."""
    return tuple(parse_depths(None, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)))


def depths_option(help: str):  # noqa: A002
    """The shared ``--depths`` option: N evenly spaced depths or a comma list. Each depth is its
    own cell (the ``depth`` column), so the list itself is not part of the cell key. ``--depth``
    (the first release's explicit list) is kept as a hidden alias."""
    from .base import Option

    return Option("depths", help, parse_depths_option, identity=False, aliases=("--depth",), alias_parse=_explicit_depths)
