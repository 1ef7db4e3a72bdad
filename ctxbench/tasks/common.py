"""Small helpers task modules share: the factor axis of a method, shared-prefix forward counts and the
chat default. The option parsers live in :mod:`ctxbench.tasks.options` and the trial machinery in
:mod:`ctxbench.tasks.trials`; both are re-exported here, where plug-ins written for 0.1 import them."""

from __future__ import annotations

from ctxbench.tasks.options import (  # noqa: F401  (re-exported for plug-ins)
    depths_option,
    parse_bool,
    parse_chat,
    parse_choice,
    parse_depths,
    parse_depths_option,
    parse_positive_int,
    variants_parser,
)
from ctxbench.tasks.trials import (  # noqa: F401  (re-exported for plug-ins)
    TRIAL_BATCH,
    accuracy_rows,
    answer_cells,
    check_trials,
    decode_length,
    most_trials,
    parse_trials,
    trial_cells,
    trials_options,
)


def factors_for(method, factors) -> list[float | None]:
    """The factors a method runs at: all of them, or ``[None]`` (once) when it ignores the factor.
    Rows of such a cell have an empty ``factor``; tables show them beside every factor."""
    return list(factors) if method.uses_factor else [None]


def shared_prefix_cost(lengths, depths, trials: int, share: bool = True) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(forwards, cached, counts) for plans of a task whose trials share everything before their
    needle: one running prefix per length up to the deepest needle, then each trial's suffix after
    its needle's depth, attending to the ``n * d`` tokens cached before it. Every trial of a
    (length, depth) has the same suffix, so it is stated once with the trial count (a
    :class:`~ctxbench.tasks.base.CostItem`'s ``counts``): the plan's size does not grow with
    ``trials``. ``share=False`` (a method that is not causal, ``MethodSetting.causal``): every
    trial's whole prompt, nothing cached."""
    if not share:
        return tuple(n for n in lengths for _ in depths), (0,) * (len(lengths) * len(depths)), (trials,) * (len(lengths) * len(depths))
    suffixes = [(max(1, int(n * (1 - d))), n) for n in lengths for d in depths]
    forwards = tuple(max(1, int(n * max(depths))) for n in lengths) + tuple(s for s, _ in suffixes)
    cached = (0,) * len(lengths) + tuple(n - s for s, n in suffixes)
    return forwards, cached, (1,) * len(lengths) + (trials,) * len(suffixes)


def shared_prefix_forwards(lengths, depths, trials: int, share: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:func:`shared_prefix_cost` with one entry per trial, as plug-ins written for 0.1 read it
    (their plans grow with the trial count; the built-in tasks state counts instead)."""
    forwards, cached, counts = shared_prefix_cost(lengths, depths, trials, share)
    return (tuple(n for n, k in zip(forwards, counts, strict=True) for _ in range(k)),
            tuple(c for c, k in zip(cached, counts, strict=True) for _ in range(k)))  # fmt: skip


CHAT_HELP = ("wrap the prompt in the model's chat template; default: under --protocol ruler the model's own template "
             "when its tokenizer ships one (RULER runs chat models through their template), raw otherwise; "
             "--no-chat for raw prompts")


def settle_chat(lm, settings):
    """``chat`` left to the model (``None``): the model's chat template under RULER's protocol when
    its tokenizer ships one, as RULER prompts chat models (its ``template.py`` has one per model
    family and ``base`` for base models); raw prompts under ``exact``, as every run before."""
    from dataclasses import replace

    if settings.chat is not None:
        return settings
    ships = bool(getattr(lm.tokenizer, "chat_template", None))
    return replace(settings, chat=settings.protocol == "ruler" and ships)

