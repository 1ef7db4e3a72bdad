"""The trial machinery of retrieval tasks: ``--trials`` (a number, or ``auto`` with its ceiling and
budget), decoding each cell's trials with shared prefixes computed once (keeping the trials a results
file already holds), accuracy rows with their Wilson interval, and the answer NLL of each trial
(``--metrics answer_nll``: teacher-forced mean NLL of the expected answer after the prompt)."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import replace
from typing import Any

from ctxbench.errors import UserError, unknown
from ctxbench.model.thinking import split
from ctxbench.stats import bootstrap_mean, wilson
from ctxbench.tasks.base import Measurement, Option
from ctxbench.tasks.options import check_most, parse_positive_int
from ctxbench.tasks.thinking import row_extra

AUTO = "auto"
ALL = "all"  # every item of a task's data (longbench2, qa, babilong --data): what the benchmark itself reports
TRIAL_BATCH = 10  # --trials auto adds trials in batches of this many
# The most trials a cell runs: at 10,000 trials a 95% Wilson interval is +-1 point at most, finer
# than any difference between methods is worth; beyond it a run only burns time (and a plan that
# grew with the trial count once ran a machine out of memory).
MOST_TRIALS = 10_000
WHY_MOST = "its 95% interval is then +-1 point"


def parse_trials(value) -> int | str:
    """``--trials N``, ``--trials auto`` (trials until the paired comparisons are decided) or
    ``--trials all`` (every item of a task's data; refused by tasks without data, `check_trials`)."""
    if isinstance(value, str) and value.strip().lower() in (AUTO, ALL):
        return value.strip().lower()
    return parse_positive_int(value, "--trials", MOST_TRIALS, WHY_MOST)


def trials_options(what: str, default: int | str = 4) -> list:
    """The options of a task that counts trials: ``--trials N|auto|all`` and what bounds ``auto``.
    None is part of a cell's identity: resume handles the count (a cell holding fewer trials
    than asked gets the missing ones), and the others only decide how many trials run."""

    return [
        Option("trials", f"{what} per cell (default {default}); all: every item of the data (tasks over a dataset); auto: batches of {TRIAL_BATCH} until every paired comparison "
               "with --baseline (or with the best method at that length) is separated at 5% after Holm or equivalent within "
               "10 points, up to --max-trials", parse_trials, identity=False),  # fmt: skip
        Option("max_trials", "with --trials auto: the most trials per cell (default 50)", lambda v: parse_positive_int(v, "--max-trials", MOST_TRIALS, WHY_MOST),
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


def numbered_trials(settings) -> int:
    """The trials a cell asks for (``Task.trials``): ``--trials N``; 0 under ``auto``, whose batches decide
    (``all``: `ctxbench.tasks.base.Task.trials_asked` counts the cell's items)."""
    return settings.trials if isinstance(settings.trials, int) else 0


def check_trials(settings, items: bool = False) -> None:
    """The trial options agree (before any model loads); ``items``: the task runs over a dataset,
    so ``--trials all`` (every item) is allowed."""
    auto = settings.trials == AUTO
    if settings.trials == ALL and not items:
        raise UserError("--trials all runs every item of a dataset, and this run has none (its prompts are generated)",
                        "pass a number, e.g. --trials 10")  # fmt: skip
    if settings.trials == ALL:
        pass
    elif not auto and (not isinstance(settings.trials, int) or isinstance(settings.trials, bool) or settings.trials < 1):
        raise UserError(f"--trials {settings.trials} must be a whole number >= 1, auto or all", "pass e.g. --trials 10")
    for flag, n in (("--trials", settings.trials), ("--max-trials", settings.max_trials)):  # settings made in Python too
        if isinstance(n, int):
            check_most(n, flag, MOST_TRIALS, WHY_MOST)
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

            raise unknown("--baseline label", settings.baseline, labels)


def trials_said(settings) -> str:
    """The trials option as the user gave it, for a message: ``--trials 50``, or under ``auto`` the
    ``--max-trials`` that bounds it (never a number the user did not type as ``--trials``)."""
    if settings.trials == AUTO:
        return f"--trials auto (up to --max-trials {settings.max_trials})"
    return f"--trials {settings.trials}"


def fewer_trials(settings, most: int) -> str:
    """The fix for asking more trials than ``most`` items: the option to lower, as the user gave it."""
    if settings.trials == AUTO:
        return f"pass --max-trials {most} or fewer, or --trials {ALL} to run each item once"
    return f"use --trials {most} or fewer, or --trials {ALL}"


def most_trials(settings, items: int | None = None) -> int:
    """The trials a cell can run: ``--trials``, ``--max-trials`` under ``auto`` (plans say the most it
    can cost), or under ``all`` the ``items`` of the cell's data."""
    if settings.trials == ALL:
        if items is None:
            raise ValueError("--trials all needs the item count of the cell's data")
        return items
    return settings.max_trials if settings.trials == AUTO else settings.trials


def trial_cells(lm, ctx, prompts_by_cell: dict, max_new_tokens: int, measure, finished=None, continuation=None, think=None,
                mode: str = ""):  # fmt: skip
    """:func:`answer_cells` for the trials a cell does not hold yet: yields ``(cell, [per-trial
    Measurement, ...])`` in trial order. ``measure(trial, prompt, new_tokens, seconds)`` makes a
    trial's row; a trial the results file already holds (``ctx.kept[cell][t]``, from a run with
    fewer trials: trial t's prompt is drawn from t alone, so it would come out the same) is
    reused, not decoded again, so raising ``--trials`` costs only the new trials.
    ``continuation(prompt) -> ids``: the expected answer, scored in each decoded trial's own prefill
    under a causal method (:func:`answer_cells`); its row carries ``extra.answer_nll`` (mean NLL per
    token) and ``extra.answer_tokens``. Rows without them (kept trials, a method that is not causal)
    are for :func:`ctxbench.tasks.trials.answer_nlls`, which scores them before decoding.
    ``think`` (:class:`ctxbench.model.thinking.Thinking`): each trial thinks up to the budget first;
    ``measure`` sees the answer's tokens only (the reasoning stripped by ctxbench,
    :func:`ctxbench.model.thinking.split`) and the row records ``think_tokens``, ``think_exhausted``
    and ``think_closed``. Every decoded row records ``prompt_sha256`` (:func:`prompt_digest`) and,
    given ``mode``, ``prompt_mode``."""

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
        for cell, answers in answer_cells(lm, todo, max_new_tokens, finished, continuation, think):
            rows = [_recorded(measure(t, a[0], a[1], a[2]), a[0], mode, a[4] if think is not None else None)
                    for t, a in zip(index[cell], answers, strict=True)]  # fmt: skip
            if continuation is not None:
                scored = {t: (float(a[3].double().mean()), int(a[3].numel()), 0.0)
                          for t, a in zip(index[cell], answers, strict=True) if a[3] is not None}  # fmt: skip
                rows = with_answer_nll(rows, scored)
            yield cell, whole(cell, dict(zip(index[cell], rows, strict=True)))


def prompt_digest(ids) -> str:
    """``sha256:`` and the hex SHA-256 of a prompt's token ids, each as 4 bytes little-endian
    unsigned (``struct.pack("<%dI", *ids)``): the exact token ids a trial was scored on, whatever
    tokenizer or template made them (``ctxbench show-prompt`` rebuilds and checks a row's prompt)."""
    ids = [int(t) for t in ids]
    return "sha256:" + hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()


def _recorded(row: Measurement, prompt, mode: str, thought: dict | None) -> Measurement:
    """A decoded trial's row with the prompt it was scored on (its mode and the digest of its token
    ids) and what it thought (:func:`ctxbench.tasks.thinking.row_extra`)."""
    extra = {**row.extra, "prompt_sha256": prompt_digest(prompt.ids), **({"prompt_mode": mode} if mode else {}), **(thought or {})}
    return replace(row, extra=extra)


def accuracy_rows(scores: list[float], tokens: int, seconds: float, **extra) -> list:
    """A cell's ``accuracy`` (mean per-trial score) with its trial count, and its 95% Wilson
    interval as ``accuracy_lo``/``accuracy_hi`` rows (for fractional scores, RULER's
    string_match_all, the interval treats the summed score as the count of successes)."""

    n = len(scores)
    total = float(sum(scores))
    lo, hi = wilson(round(total), n) if n else (float("nan"), float("nan"))
    info = {"trials": n, "correct": total, **extra}
    agg: dict[str, Any] = dict(trial="all", tokens=tokens)
    return [
        Measurement("accuracy", total / n, seconds=round(seconds, 4), extra=info, **agg),
        Measurement("accuracy_lo", lo, extra={"interval": "95% Wilson"}, **agg),
        Measurement("accuracy_hi", hi, extra={"interval": "95% Wilson"}, **agg),
    ]


def answer_cells(lm, prompts_by_cell: dict, max_new_tokens: int, finished=None, continuation=None, think=None):
    """Greedy answers of every cell's trial prompts (``{cell: [prompt, ...]}``, prompts with
    ``.ids``), all cells of one (method, factor, length) decoded together with their shared
    prefixes computed once (:func:`ctxbench.model.decoding.decode_shared`; each prompt whole under a method
    that is not causal, ``ms-poe``). Yields ``(cell, [(prompt,
    new_tokens, seconds), ...])`` in trial order as soon as all of a cell's trials are answered.
    Dynamic methods see the cell's length as theirs, or the longest prompt plus the new tokens where
    that is longer (a prompt of exactly the length decodes past it): one value per cell, whichever
    trials run, so a trial scores the same in a run of 10 trials as of 50. ``finished(prompt,
    new_tokens)``: the trial's score can no longer change, so its decoding may stop early.
    ``continuation(prompt) -> ids``: each entry is ``(prompt, new_tokens, seconds, nll)``, ``nll``
    the (k,) NLL of the expected answer scored in the prompt's own prefill (no second prefill), or
    None under a method that is not causal, whose prompt and answer cannot share a forward.
    ``think``: each trial thinks first (:meth:`ctxbench.backends.base.Session.answers`); each entry
    is then ``(prompt, answer_tokens, seconds, nll, thought)``: the tokens after the reasoning
    (stripped here, by the tags' ids: :func:`ctxbench.model.thinking.split`) and what the row
    records of it."""
    first = next(iter(prompts_by_cell))
    assert all((c.method, c.factor, c.length) == (first.method, first.factor, first.length) for c in prompts_by_cell)
    owner = [(cell, t) for cell, prompts in prompts_by_cell.items() for t in range(len(prompts))]
    flat = [prompts_by_cell[cell][t] for cell, t in owner]
    seq_len = decode_length(first, flat, max_new_tokens if think is None else think.steps(max_new_tokens))
    pending = {cell: len(prompts) for cell, prompts in prompts_by_cell.items()}
    done: dict = {}
    scored = continuation is not None and first.method.causal
    conts = [list(continuation(p)) for p in flat] if scored else None
    with lm.session(first.method, first.factor or 1.0, seq_len) as engine:
        stop = None if finished is None else (lambda i, new: finished(flat[i], new))
        more = {} if think is None else {"think": think}  # a plug-in backend written before thinking is asked as before
        for a in engine.answers([p.ids for p in flat], max_new_tokens, finished=stop, share=first.method.causal, continuations=conts, **more):
            cell, t = owner[a.index]
            if think is None:
                done[(cell, t)] = (flat[a.index], a.tokens, a.seconds) + ((a.nll,) if continuation is not None else ())
            else:
                part = split(a.tokens, think, flat[a.index].ids)
                done[(cell, t)] = (flat[a.index], part.answer, a.seconds, a.nll, row_extra(part, a.forced))
            pending[cell] -= 1
            if pending[cell] == 0:
                yield cell, [done[(cell, i)] for i in range(len(prompts_by_cell[cell]))]


def decode_length(cell, prompts: list, max_new_tokens: int) -> int:
    """The sequence length a dynamic method is applied for when ``prompts`` of ``cell``'s group are
    answered: the cell's length, or the longest prompt plus its new tokens where that is longer."""
    return max(cell.length, max(len(p.ids) for p in prompts) + max_new_tokens)


def answer_nlls(lm, ctx, prompts_by_cell: dict, continuation, max_new_tokens: int) -> dict:
    """Teacher-forced NLL of each trial's expected answer ``continuation(prompt) -> ids`` after its
    prompt, for the trials decoding will not score in their own prefill
    (:func:`ctxbench.tasks.common.trial_cells` with ``continuation``): trials the file holds
    (``ctx.kept``) without it, and every trial of a method that is not causal (``ms-poe``: its
    prompt and answer must be two forwards). All cells of one (method, factor, length) together,
    before decoding, with shared prefixes computed once (:func:`ctxbench.model.decoding.score_shared`),
    the method applied for the length decoding uses. Returns ``{cell: {trial: (mean NLL per answer
    token, answer tokens, seconds)}}``."""
    kept = getattr(ctx, "kept", None) or {}
    first = next(iter(prompts_by_cell))

    def unscored(cell, t) -> bool:
        if t in kept.get(cell, {}):
            return "answer_nll" not in kept[cell][t].extra
        return not first.method.causal

    owner = [(cell, t) for cell, prompts in prompts_by_cell.items() for t in range(len(prompts)) if unscored(cell, t)]
    out: dict = {cell: {} for cell in prompts_by_cell}
    if not owner:
        return out
    flat = [prompts_by_cell[cell][t] for cell, t in owner]
    with lm.session(first.method, first.factor or 1.0, decode_length(first, flat, max_new_tokens)) as engine:
        for s in engine.scores([p.ids for p in flat], [continuation(p) for p in flat], share=first.method.causal):
            cell, t = owner[s.index]
            out[cell][t] = (float(s.nll.double().mean()), int(s.nll.numel()), s.seconds)
    return out


def with_answer_nll(rows: list[Measurement], scored: dict) -> list[Measurement]:
    """Per-trial rows with ``extra.answer_nll`` / ``extra.answer_tokens`` from ``scored``
    (``{trial: (nll, tokens, seconds)}``; kept trials already carry theirs)."""
    out = []
    for r in rows:
        if r.trial in scored:
            nll, k, _ = scored[r.trial]
            r = replace(r, extra={**r.extra, "answer_nll": nll, "answer_tokens": k})
        out.append(r)
    return out


def answer_nll_rows(rows: list[Measurement], seconds: float) -> list[Measurement]:
    """A cell's ``answer_nll`` (mean over trials of each trial's mean NLL per answer token, nats)
    and its 95% percentile bootstrap interval over trials (``answer_nll_lo``/``_hi``; NaN with
    fewer than two trials), from the per-trial rows' ``extra.answer_nll``."""

    values = [float(r.extra["answer_nll"]) for r in rows]
    tokens = sum(int(r.extra["answer_tokens"]) for r in rows)
    n = len(values)
    lo, hi = bootstrap_mean(values, [1.0] * n) if n >= 2 else (float("nan"), float("nan"))
    agg: dict[str, Any] = dict(trial="all", tokens=tokens)
    note = {"interval": "95% bootstrap over trials" if n >= 2 else "none (fewer than 2 trials)"}
    return [
        Measurement("answer_nll", sum(values) / n if n else float("nan"), seconds=round(seconds, 4), extra={"trials": n}, **agg),
        Measurement("answer_nll_lo", lo, extra=note, **agg),
        Measurement("answer_nll_hi", hi, extra=note, **agg),
    ]
