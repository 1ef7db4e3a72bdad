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
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ctxbench.errors import UserError
from ctxbench.synthetic import babilong as bl
from ctxbench.tasks.base import Option
from ctxbench.tasks.generated import Spec, generated_task

NAME = "babilong"
HUB_HINT = ("export BABILong's rows once, e.g. python -c \"import datasets; datasets.load_dataset('RMT-team/babilong', '4k')['qa1']"
            ".to_json('qa1.jsonl')\", then pass --data qa1.jsonl (or a directory of qa1.jsonl ... qa5.jsonl)")  # fmt: skip


def _haystack(value) -> str:
    from ctxbench.tasks.ruler import haystack_of

    text = str(value)
    haystack_of(None if text == "pydoc" else text)  # fails here, before any model loads
    return text


def _data(value) -> str:
    return str(value).strip()


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
    from ctxbench.tasks.generated import _variants

    variants = _variants(SPEC, settings)
    if settings.data:
        path = Path(settings.data).expanduser()
        if path.is_file() and len(variants) > 1:
            raise UserError(f"one --data file for {len(variants)} variants ({', '.join(variants)})",
                            "pick one with --variant, or give a directory holding qa1.jsonl ... qa5.jsonl")  # fmt: skip
        data = {v: rows_of(settings.data, v) for v in variants}
        from ctxbench.tasks.trials import most_trials

        for v, rows in data.items():
            if most_trials(settings) > len(rows):
                raise UserError(f"--trials {most_trials(settings)} is more than the {len(rows)} rows of --data for {v}",
                                f"use --trials {len(rows)} or fewer")  # fmt: skip
        digest = hashlib.sha256(repr(sorted((v, r) for v, rows in data.items() for r in map(lambda x: tuple(sorted(x.items())), rows))).encode()).hexdigest()[:16]
        return f"babilong:{path.name}", {"data": digest}, {"rows": data}, [f"{v}: {len(r)} published rows" for v, r in data.items()]
    from ctxbench.tasks.ruler import haystack_of

    haystack = haystack_of(None if settings.haystack in (None, "pydoc") else settings.haystack)
    fields = {"generator": "babilong-qa1-qa5/1", "haystack": haystack.digest}
    return f"babilong:{haystack.name}", fields, {"haystack": haystack}, []


def _build(tokenizer, fr, variant, length, seed, trial, state):
    if "rows" in state:
        return bl.from_record(variant, tokenizer, fr, state["rows"][variant][trial])
    return bl.build(variant, tokenizer, fr, state["haystack"], length, seed, trial)


def _strict(text, p):
    return bl.strict(text, p.answers[0], p.extra["question"], p.extra["variant"])


def _build_tagged(tokenizer, fr, variant, length, seed, trial, state):
    from dataclasses import replace

    p = _build(tokenizer, fr, variant, length, seed, trial, state)
    return replace(p, extra={**p.extra, "variant": variant})


SPEC = Spec(name=NAME, variants=bl.VARIANTS, default_variants=bl.VARIANTS, build=_build_tagged, load=_load, chat="model",
            scorers={"strict": _strict, "lenient": lambda text, p: bl.lenient(text, p.answers[0])},
            max_new_tokens=bl.MAX_NEW_TOKENS)  # fmt: skip

OPTIONS = (
    Option("haystack", "background text of generated prompts: pydoc (the running Python's prose, default), essays (RULER's Paul "
           "Graham essays, after `ctxbench data fetch ruler`), a .txt/.md file or directory; its digest is on every row",
           _haystack, identity=False),  # fmt: skip
    Option("data", "BABILong's published rows instead of generated prompts: a JSON/JSONL file of {input, question, target} for "
           "the one --variant run, or a directory of qa1.jsonl ... qa5.jsonl; their digest is on every row", _data,
           metavar="PATH", identity=False),  # fmt: skip
)

TASK = generated_task(SPEC, "BABILong qa1-qa5: bAbI facts hidden in background prose (generated offline, or --data the published rows), "
                      "scored strictly (official) and leniently (lm-eval), x lengths x methods.", OPTIONS)
