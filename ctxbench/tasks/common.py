"""Small helpers task modules share: the factor axis of a method, shared-prefix forward counts and the
chat default. The option parsers live in :mod:`ctxbench.tasks.options` and the trial machinery in
:mod:`ctxbench.tasks.trials`; both are re-exported here, where plug-ins written for 0.1 import them."""

from __future__ import annotations

from dataclasses import replace

from ctxbench.errors import UserError
from ctxbench.tasks import thinking
from ctxbench.tasks.base import Option
from ctxbench.tasks.options import (  # noqa: F401  (re-exported for plug-ins)
    chat_of_mode,
    depths_option,
    mode_of_chat,
    parse_bool,
    parse_chat,
    parse_choice,
    parse_depths,
    parse_depths_option,
    parse_positive_int,
    parse_prompt_mode,
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
    if settings.chat is not None:
        return settings
    ships = bool(getattr(lm.tokenizer, "chat_template", None))
    return replace(settings, chat=settings.protocol == "ruler" and ships)



PROMPT_MODE_HELP = ("chat: the model's chat template; completion: RULER's raw prompt with its answer prefix; auto: the task's "
                    "rule (see --chat); --chat/--no-chat are the same as chat/completion; chat,completion runs both, which rank pairs")


def generation_options() -> list:
    """The options every task that generates shares: ``--prompt-mode`` (onto ``chat``, which is the
    cell's identity, so it is not one itself) and the thinking budget and tags."""
    return [Option("prompt_mode", PROMPT_MODE_HELP, parse_prompt_mode, metavar="MODE", identity=False, split=True), *thinking.options()]


def check_generation(settings, answer_budget: int | None = None, default_chat: bool | None = None) -> None:
    """Before any model loads: ``--prompt-mode`` agrees with ``--chat`` and names one mode, and the
    thinking budget fits every length given (:func:`ctxbench.tasks.thinking.validate`).
    ``default_chat``: the settings' default of ``chat`` (a ``chat`` at it was not given)."""
    modes = getattr(settings, "prompt_mode", None)
    if modes:
        if len(modes) > 1 and "auto" in modes:  # auto is one of the others: the same cells twice
            raise UserError(f"--prompt-mode {','.join(modes)}: auto picks chat or completion, so a list of modes names them",
                            "pass --prompt-mode chat,completion")  # fmt: skip
        for mode in modes:
            want = chat_of_mode(mode)
            if settings.chat != default_chat and want is not None and settings.chat != want:
                raise UserError(f"--prompt-mode {','.join(modes)} and --{'' if settings.chat else 'no-'}chat disagree",
                                "give one of them (--chat is chat, --no-chat is completion)")  # fmt: skip
    thinking.validate(settings, answer_budget)


def mode_note(lm, settings) -> list[str]:
    """Under ``--prompt-mode auto``, the mode the task's rule chose and why, for the run's notes
    (``prepare``'s :attr:`ctxbench.tasks.base.Context.notes`: said once, in the summary; an error
    stays one line); [] for any other mode."""
    if tuple(getattr(settings, "prompt_mode", None) or ()) != ("auto",):
        return []
    protocol = getattr(settings, "protocol", None)
    if settings.chat:
        why = "the model's tokenizer ships a chat template" + (", RULER's protocol" if protocol == "ruler" else "")
    elif not getattr(lm.tokenizer, "chat_template", None):
        why = "the model's tokenizer ships no chat template"
    elif protocol not in (None, "ruler"):
        why = f"--protocol {protocol} prompts raw, as RULER's exact-length runs before it"
    else:
        why = "the task's protocol prompts raw"
    return [f"prompt mode {mode_of_chat(settings.chat)} (auto: {why})"]


def settle_mode(settings, default_chat: bool | None = None):
    """``--prompt-mode`` onto ``chat`` (``auto`` leaves it to the task's rule); ``default_chat`` as
    :func:`check_generation`'s."""
    modes = getattr(settings, "prompt_mode", None)
    if modes and chat_of_mode(modes[0]) is not None and settings.chat == default_chat:
        return replace(settings, chat=chat_of_mode(modes[0]))
    return settings


def settle_generation(settle, lm, settings):
    """A generating task's settle: ``--prompt-mode`` onto ``chat``, the task's own ``settle`` (its
    ``auto`` rule), then the thinking budget (:func:`ctxbench.tasks.thinking.settle`)."""
    settings = settle_mode(settings)
    if settle is not None:
        settings = settle(lm, settings)
    return thinking.settle(lm, settings)
