"""BABILong qa1-qa5 (``ctxbench babilong``; arXiv 2406.10149): bAbI stories hidden in background
prose, generated offline at each length (:mod:`ctxbench.synthetic.babilong`), or the published rows
with ``--data``. Each trial is scored by both scorers: the headline ``score``/``accuracy`` by
BABILong's official strict one (the answer must be the only label the output names), and
``accuracy_lenient`` by lm-evaluation-harness's substring match (:mod:`ctxbench.tasks.generated`).

``--data PATH``: a JSON or JSON-lines file of BABILong's released rows (``input``, ``question``,
``target``) for the one variant that runs, or a directory holding ``qa1.jsonl`` (``.json``) ... per
variant; trial ``t`` is row ``t``, and the rows' own context is used whatever the ``--len`` (the
cell's length then names the file's length configuration; ``tokens`` on each row says what ran).
Nothing is downloaded: export a config of the hub's ``RMT-team/babilong`` once with ``datasets``.
With ``--data`` every row runs by default (``--trials all``).

``--prompts current|2024-05`` picks the version of BABILong's prompts (default ``current``, the
upstream text now); ``--length-of context|prompt`` what ``--len`` measures (default ``context``,
BABILong's own: the context is the length, the instruction and question on top; ``prompt``: the
whole prompt plus the 20 new tokens, RULER's accounting). Both are part of the cell identity; rows
written before them read as ``2024-05`` and ``prompt``, what those runs used.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from ctxbench.errors import UserError, unknown
from ctxbench.parsing import len_label
from ctxbench.synthetic import babilong as bl
from ctxbench.tasks import generated
from ctxbench.tasks.base import Option, Reference, Task
from ctxbench.tasks.generated import Spec, generated_task, prompt_variants
from ctxbench.tasks.options import text_parser
from ctxbench.tasks.ruler import haystack_of
from ctxbench.tasks.trials import ALL, fewer_trials, most_trials, trials_said

NAME = "babilong"
HUB_HINT = ("export BABILong's rows once, e.g. python -c \"import datasets; datasets.load_dataset('RMT-team/babilong', '4k')['qa1']"
            ".to_json('qa1.jsonl')\", then pass --data qa1.jsonl (or a directory of qa1.jsonl ... qa5.jsonl)")  # fmt: skip


def _haystack(value) -> str:
    text = text_parser("--haystack", 'haystack = "essays"')(value)
    haystack_of(None if text == "pydoc" else text)  # fails here, before any model loads
    return text


_data = text_parser("--data", 'data = "qa1.jsonl"')


def _choice(flag: str, choices: tuple[str, ...]):
    def parse(value) -> str:
        text = str(value).strip()
        if text not in choices:
            raise unknown(flag, text, choices)
        return text

    return parse


@dataclass(frozen=True)
class Settings(generated.Settings):
    # None: every row (all) with --data, else 4; only the constructor sees it (__post_init__ decides)
    trials: int | str | None = None  # type: ignore[assignment]  # a default sentinel, never read as None
    prompts: str = "current"
    length_of: str = "context"

    def __post_init__(self) -> None:
        if self.trials is None:  # a default that depends on --data: decided once, here, so every reader sees it
            object.__setattr__(self, "trials", ALL if self.data else 4)


def _file_of(spec: str, variant: str) -> Path:
    path = Path(spec).expanduser()
    if path.is_dir():
        for suffix in (".jsonl", ".json"):
            if (path / f"{variant}{suffix}").is_file():
                return path / f"{variant}{suffix}"
        raise UserError(f"--data directory '{spec}' has no {variant}.jsonl or {variant}.json", HUB_HINT)
    if not path.is_file():
        raise UserError(f"--data '{spec}' not found", HUB_HINT)
    return path


@functools.lru_cache(maxsize=8)
def _rows(path: str, mtime_ns: int, size: int) -> tuple[dict, ...]:
    try:
        raw = Path(path).read_bytes()
        return tuple(bl.read_records(raw, f"--data '{path}'"))
    except bl.BadRecords as exc:
        raise UserError(str(exc), HUB_HINT) from None
    except OSError as exc:
        raise UserError(f"cannot read --data '{path}': {exc.strerror}", "check the file's permissions") from None


def rows_of(spec: str, variant: str) -> tuple[dict, ...]:
    path = _file_of(spec, variant)
    stat = path.stat()
    return _rows(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def _load(settings):
    """Generated: the haystack's digest and the recipe; published rows: their digest, per variant."""
    variants = prompt_variants(SPEC, settings)
    if settings.data:
        path = Path(settings.data).expanduser()
        if path.is_file() and len(variants) > 1:
            raise UserError(f"one --data file for {len(variants)} variants ({', '.join(variants)})",
                            "pick one with --variant, or give a directory holding qa1.jsonl ... qa5.jsonl")  # fmt: skip
        data = {v: rows_of(settings.data, v) for v in variants}

        for v, rows in data.items():
            if settings.trials != ALL and most_trials(settings) > len(rows):
                raise UserError(f"{trials_said(settings)} is more than the {len(rows)} rows of --data for {v}",
                                fewer_trials(settings, len(rows)))  # fmt: skip
        digest = hashlib.sha256(repr(sorted((v, r) for v, rows in data.items() for r in map(lambda x: tuple(sorted(x.items())), rows))).encode()).hexdigest()[:16]
        return (f"babilong:{path.name}", {"data": digest}, {"rows": data, "prompts": settings.prompts},
                [f"{v}: {len(r)} published rows" for v, r in data.items()])  # fmt: skip

    haystack = haystack_of(None if settings.haystack in (None, "pydoc") else settings.haystack)
    fields = {"generator": "babilong-qa1-qa5/1", "haystack": haystack.digest}
    return f"babilong:{haystack.name}", fields, {"haystack": haystack, "prompts": settings.prompts, "length_of": settings.length_of}, []


# How far a published row's context may be from the cell's --len: BABILong's configurations are
# counted in another tokenizer (a "4k" row is 3-5k tokens in most), a neighbouring one is 2x away.
LENGTH_SLACK = 1.5


def _build(tokenizer, fr, variant, length, seed, trial, state):
    if "rows" in state:
        record = state["rows"][variant][trial]
        _check_row_length(tokenizer, record, variant, length, trial)
        return bl.from_record(variant, tokenizer, fr, record, state["prompts"])
    return bl.build(variant, tokenizer, fr, state["haystack"], length, seed, trial, state["prompts"], state["length_of"])


def _check_row_length(tokenizer, record: dict, variant: str, length: int, trial: int) -> None:
    """A published row whose context is far from ``--len`` (more than :data:`LENGTH_SLACK` x off:
    another of BABILong's length configurations) would be recorded as a cell of a length it is not:
    one line naming the row, its tokens and the --len to give instead."""
    tokens = len(tokenizer(record["input"], add_special_tokens=False)["input_ids"])
    if not length / LENGTH_SLACK <= max(tokens, 1) <= length * LENGTH_SLACK:
        raise UserError(f"--data row {trial} of {variant} holds {tokens:,} tokens of context, far from --len {len_label(length)} "
                        f"({length:,}): rows of another of BABILong's length configurations",
                        f"pass --len {len_label(max(tokens, 1))} for these rows, or the rows of the {len_label(length)} configuration")  # fmt: skip


def _items(settings) -> dict[str, int]:
    """{variant: published rows} under ``--data`` (``--trials all`` runs each of them)."""
    return {v: len(rows_of(settings.data, v)) for v in prompt_variants(SPEC, settings)} if settings.data else {}


def _forward(settings, length: int) -> int:
    """A prompt's rough tokens at ``length``: the context is the length, the instruction, examples
    and question come on top (about 4 characters a token), under ``--length-of context``."""
    if settings.length_of == "prompt" and not settings.data:
        return length - bl.MAX_NEW_TOKENS
    return length + len(bl.formatted("qa5", "", "Who gave the football?", settings.prompts)) // 4


def _strict(text, p):
    return bl.strict(text, p.answers[0], p.extra["question"], p.extra["variant"])


def _build_tagged(tokenizer, fr, variant, length, seed, trial, state):
    p = _build(tokenizer, fr, variant, length, seed, trial, state)
    return replace(p, extra={**p.extra, "variant": variant})


SPEC = Spec(name=NAME, variants=bl.VARIANTS, default_variants=bl.VARIANTS, build=_build_tagged, load=_load, chat="model",
            scorers={"strict": _strict, "lenient": lambda text, p: bl.lenient(text, p.answers[0])},
            max_new_tokens=bl.MAX_NEW_TOKENS, items=_items, forward=_forward)  # fmt: skip

OPTIONS = (
    Option("haystack", "background text of generated prompts: pydoc (the running Python's prose, default), essays (RULER's Paul "
           "Graham essays, after `ctxbench data fetch ruler`), a .txt/.md file or directory; its digest is on every row",
           _haystack, identity=False),  # fmt: skip
    Option("data", "BABILong's published rows instead of generated prompts: a JSON/JSONL file of {input, question, target} for "
           "the one --variant run, or a directory of qa1.jsonl ... qa5.jsonl; their digest is on every row", _data,
           metavar="PATH", identity=False),  # fmt: skip
    Option("prompts", "the version of BABILong's prompts: current (booydar/babilong prompts.py now: blank lines between "
           "sections, five strings fixed, the context stripped; default) or 2024-05 (its first version, every run before "
           "--prompts)", _choice("--prompts", bl.PROMPT_VERSIONS)),  # fmt: skip
    Option("length_of", "what --len measures: context (BABILong's own: the facts and background text are the length, the "
           "instruction and question on top; default) or prompt (the whole prompt plus the 20 new tokens, RULER's "
           "accounting, every run before --length-of)", _choice("--length-of", bl.LENGTH_OF)),  # fmt: skip
)

REFERENCES = (
    Reference("prompts", "current", "booydar/babilong `babilong/prompts.py` (`DEFAULT_TEMPLATE`, `DEFAULT_PROMPTS`, "
              "`get_formatted_input`), `babilong/metrics.py`, `babilong_utils.py`", "commit 7a6efee (2026-06-01; prompts.py last changed in ffa075f, 2024-08-21)",
              "the template, the qa1-qa5 instructions, examples and post prompts byte for byte, the context stripped; the "
              "strict scorer (`compare_answers`); 20 new tokens; the context (facts and background) is the length "
              "(`--length-of context`); with `--data`, every published row (`--trials all`). Token-exact in tests",
              "generated stories: ctxbench's bAbI-style generator and a haystack of your choice (BABILong: bAbI's stories "
              "in PG-19); whole background sentences up to the length (BABILong cuts the last sentence's tokens to hit "
              "it exactly); BABILong's optional system prompt is not sent",
              "the defaults; `--data` with BABILong's published rows for its stories", default=True),
    Reference("prompts", "2024-05", "booydar/babilong `babilong/prompts.py`", "commit d796183 (2024-05-15)",
              "the first version of the template and prompts (no blank lines between sections, the context unstripped, "
              "`$location_1&` and `bedroom.Mary` as they were). Token-exact in tests",
              "superseded upstream by five fixes and the blank lines; kept so that runs before `--prompts` can be "
              "repeated (`--length-of prompt` then gives their lengths)",
              "`--prompts 2024-05 --length-of prompt` (what every run before these options used)"),
)

TASK: Task = generated_task(SPEC, "BABILong qa1-qa5: bAbI facts hidden in background prose (generated offline, or --data the published rows), "
                      "scored strictly (official) and leniently (lm-eval), x lengths x methods.", OPTIONS, settings=Settings,
                      trials_default="4; all with --data", references=REFERENCES,
                      legacy_options=lambda record: {**TASK.default_identity(), "prompts": "2024-05", "length_of": "prompt"})  # fmt: skip
