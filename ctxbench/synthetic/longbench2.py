"""LongBench v2 (Bai et al., 2024, arXiv 2412.15204): 503 multiple-choice questions over long real
documents, in three length buckets. No model, no torch. Two references, one per ``--template``:

- ``longbench``: THUDM/LongBench ``pred.py`` and ``prompts/0shot.txt`` (commit 2e00731,
  2025-01-15): the zero-shot template (:data:`TEMPLATE`, :func:`prompt_text`), the prompt's tokens
  (``tokenizer.encode``: BOS included where the tokenizer adds one) cut in the middle when over
  the length (``ids[:n // 2] + ids[-n // 2:]``, :func:`truncate_middle`) and decoded back to text,
  which the model's chat template then wraps; the chat wrapper and the 128 new tokens are not
  counted. ``extract_answer`` reads "The correct answer is (X)".
- ``lm-eval``: lm-evaluation-harness's ``longbench2`` task (``lm_eval/tasks/longbench2/
  _longbench_common_yaml``, unchanged since ad506a1; checked at 0.4.13.dev0, 4e7e0d4): ``doc_to_text`` (:data:`LMEVAL_TEMPLATE`,
  :func:`lmeval_text`: context and choices as they are, the question stripped, ``Answer:`` last),
  choices ``A``-``D`` scored as the continuations `` A`` .. `` D`` (``target_delimiter`` " "),
  ``TemplateLM._encode_pair`` (the whole text encoded, the context's tokens split off), and
  ``HFLM._loglikelihood_tokens``' left truncation (the last ``max_length + 1`` tokens of context
  and continuation, the last one not fed), raw text, no chat template.

Items: a JSON list or JSON lines, each with ``question``, ``context``, ``answer`` (one of A-D),
``length`` (``short``, ``medium`` or ``long``) and the four choices either as ``choice_A`` ..
``choice_D`` (the hub's ``THUDM/LongBench-v2``) or a ``choices`` list of four.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxbench.parsing import json_rows

LETTERS = ("A", "B", "C", "D")
BUCKETS = ("short", "medium", "long")
TEMPLATE = ("Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
            "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
            "Format your response as follows: \"The correct answer is (insert answer here)\".")  # fmt: skip
MC_PREFIX = "The correct answer is ("
RAW_GLUE = "\n"  # --template longbench --no-chat --mode mc: the answer prefix starts a line after pred.py's prompt
# lm_eval/tasks/longbench2/_longbench_common_yaml doc_to_text (jinja), in Python's format syntax
LMEVAL_TEMPLATE = ("Please read the following text and answer the question below.\n\n<text>\n{context}\n</text>\n\n"
                   "What is the correct answer to this question: {question}\nChoices:\n(A) {a}\n(B) {b}\n(C) {c}\n(D) {d}\n\nAnswer:")  # fmt: skip
LMEVAL_DELIMITER = " "  # lm-eval's default target_delimiter: the continuation is " A"
MAX_NEW_TOKENS = 128  # pred.py, without chain of thought


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    context: str
    choices: tuple[str, str, str, str]
    answer: str
    bucket: str


class BadItems(ValueError):
    """What is wrong with a data file, for one line naming the file, the item and the field."""


def read_items(raw: bytes, where: str) -> list[Item]:
    try:
        text = raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError:
        raise BadItems(f"{where} is not UTF-8 text") from None
    if not text.strip():
        raise BadItems(f"{where} is empty")
    try:
        rows = json_rows(text)
    except ValueError as exc:
        raise BadItems(f"{where} is not JSON or JSON lines ({str(exc)[:80]})") from None
    if not isinstance(rows, list) or not rows:
        raise BadItems(f"{where} holds no items (expected a list of LongBench v2 items)")
    return [_item(r, i, where) for i, r in enumerate(rows)]


def _item(row, i: int, where: str) -> Item:
    at = f"{where} item {i}"
    if not isinstance(row, dict):
        raise BadItems(f"{at} is not an object")
    for key in ("question", "context", "answer"):
        if not isinstance(row.get(key), str):
            raise BadItems(f"{at} has no {key!r} string")
    if "choices" in row:
        choices = row["choices"]
        if not (isinstance(choices, list) and len(choices) == 4 and all(isinstance(c, str) for c in choices)):
            raise BadItems(f"{at} field 'choices' is not a list of 4 strings")
    else:
        missing = [f"choice_{x}" for x in LETTERS if not isinstance(row.get(f"choice_{x}"), str)]
        if missing:
            raise BadItems(f"{at} has neither a 'choices' list nor a {missing[0]!r} string")
        choices = [row[f"choice_{x}"] for x in LETTERS]
    answer = row["answer"].strip()
    if answer not in LETTERS:
        raise BadItems(f"{at} field 'answer' is {row['answer']!r}, not one of A, B, C, D")
    bucket = str(row.get("length", "")).strip().lower()
    if bucket not in BUCKETS:
        raise BadItems(f"{at} field 'length' is {row.get('length')!r}, not one of short, medium, long")
    return Item(str(row.get("_id", i)), row["question"], row["context"], tuple(choices), answer, bucket)


def prompt_text(item: Item) -> str:
    """``pred.py``'s zero-shot prompt (its ``replace`` calls, in its order)."""
    return (TEMPLATE.replace("$DOC$", item.context.strip()).replace("$Q$", item.question.strip())
            .replace("$C_A$", item.choices[0].strip()).replace("$C_B$", item.choices[1].strip())
            .replace("$C_C$", item.choices[2].strip()).replace("$C_D$", item.choices[3].strip()))  # fmt: skip


def lmeval_text(item: Item) -> str:
    """lm-eval's ``doc_to_text``: the context and the choices as they are, the question stripped."""
    a, b, c, d = item.choices
    return LMEVAL_TEMPLATE.format(context=item.context, question=item.question.strip(), a=a, b=b, c=c, d=d)


def truncate_middle(ids: list[int], most: int) -> tuple[list[int], int]:
    """``pred.py``: a prompt over ``most`` tokens keeps ``ids[:most // 2] + ids[-most // 2:]``
    (``-most // 2`` is ``(-most) // 2``: an odd ``most`` keeps one more token at the end, ``most``
    in all); the tokens cut are returned with it."""
    if len(ids) <= most:
        return ids, 0
    kept = ids[: most // 2] + ids[-most // 2 :]
    return kept, len(ids) - len(kept)


def truncate_left(context: list[int], continuation: list[int], most: int) -> tuple[list[int], int]:
    """lm-eval ``HFLM._loglikelihood_tokens``: of ``context + continuation`` the last ``most + 1``
    tokens are kept and the last one is not fed, so the model reads at most ``most`` tokens; the
    context the continuation is scored after, and the context's tokens cut."""
    kept = (context + continuation)[-(most + 1) :]
    prefix = kept[: len(kept) - len(continuation)]
    return prefix, len(context) - len(prefix)


def extract_answer(response: str) -> str | None:
    """``pred.py`` ``extract_answer``."""
    response = response.replace("*", "")
    match = re.search(r"The correct answer is \(([A-D])\)", response)
    if match:
        return match.group(1)
    match = re.search(r"The correct answer is ([A-D])", response)
    return match.group(1) if match else None
