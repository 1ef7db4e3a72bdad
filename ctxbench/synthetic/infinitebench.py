"""InfiniteBench's two synthetic retrieval tasks, generated offline (Zhang et al., 2024, "∞Bench:
Extending Long Context Evaluation Beyond 100K Tokens", arXiv 2402.13718; OpenBMB/InfiniteBench's
``data/construct_synthetic_dataset.py``, prompts ``src/prompt.py``, scorers ``src/compute_scores.py``,
budgets ``src/eval_utils.py``). No model and no torch here.

``number_string`` (Retrieve.Number)
    The context is InfiniteBench's noise line ``"The grass is green. The sky is blue. The sun is
    yellow. Here we go. There and back again.\\n"`` repeated, with the needle line ``"The sequence
    of digits is {key}. Remember it. {key} is the sequence of digits.\\n"`` after ``j`` of the
    ``N`` lines. The key is drawn as the source draws it: five random digits, then five times a
    digit at a random place is repeated in place (``pos = randint(0, 5 + k - 1); keys.insert(pos,
    keys[pos])``), 10 digits with runs of repeats. Scored by ``first_int_match``: the first run of
    digits of the output must equal the key. 12 new tokens.
``kv_retrieval`` (Retrieve.KV)
    A JSON object of ``N`` pairs of random UUID strings (the source's keys file, from Liu et al.'s
    "Lost in the middle" kv task, holds ``str(uuid4())`` pairs), written as the source writes it
    (``{"k": "v", "k": "v"}``), then the asked key as the source's input (``"\\nKey: ..."``, so three
    newlines follow the object in the template); scored as the source does: the output with
    ``\\n : " ' . , ? ! { }`` turned into spaces, split into words, must hold the value. 50 new tokens.

Prompt: InfiniteBench's template for open models (``yarn_mistral_templates``, the one its
eval_utils uses for llama, yarn-mistral and yi): ``"{instruction}\\n\\n{context}\\n\\n{input}"``, for
number_string with ``"\\n\\nThe sequence of digits is"`` after it. With ``chat``, the model's chat
template wraps the text before the answer prefix (ctxbench's ``--chat``).

Length: InfiniteBench fixes ``N`` per target length (2610 noise lines for 64k, 928 pairs); here
``N`` is the largest count whose whole prompt plus the task's new tokens fits within the length
(RULER's accounting), found by bisection on the tokenised prompt. Placement: the source spreads
``j`` evenly over ``0..N`` (number_string) and asks, in its shuffled object, the pair at index
``int(cnt * N / 500)`` of sample ``cnt`` (kv_retrieval, since commit 89b7855 of 2023-12-01; before,
``(cnt // 16) * 16``, which reached only the first 53% of the object at 64k); here trial ``t`` draws ``j`` (and the asked pair) uniformly from a generator
seeded by (task, seed, length, trial), so every method sees the same prompts.
"""

from __future__ import annotations

import random
import re
import uuid

from ctxbench.synthetic.pieces import Frame, Prompt, TooShort, encode

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
NUMBER_NEEDLE = "The sequence of digits is {key}. Remember it. {key} is the sequence of digits.\n"
NUMBER_INSTRUCTION = "There is an important info hidden inside a lot of irrelevant text. Find it. I will quiz you about the important information there."
NUMBER_QUESTION = "What is the sequence of digits?"
NUMBER_PREFIX = "\n\nThe sequence of digits is"
KV_INSTRUCTION = "Extract the value corresponding to the specified key in the JSON object below."
KV_QUESTION = '\nKey: "{key}"\nThe value associated with the specified key is: '  # construct_synthetic_dataset.py: the input starts with a newline
MAX_NEW_TOKENS = {"number_string": 12, "kv_retrieval": 50}  # eval_utils.py DATA_NAME_TO_MAX_NEW_TOKENS
TEMPLATE = "{instruction}\n\n{context}\n\n{input}"  # prompt.py yarn_mistral_templates


# -- the source's draws -------------------------------------------------------------------------


def number_key(rng: random.Random) -> str:
    """construct_synthetic_dataset.py build_number_string: 5 digits, then 5 repeats in place."""
    keys = [str(rng.randint(0, 9)) for _ in range(5)]
    for k in range(5):
        pos = rng.randint(0, 5 + k - 1)
        keys.insert(pos, keys[pos])
    return "".join(keys)


def uuid_string(rng: random.Random) -> str:
    """A version-4 UUID as ``str(uuid.uuid4())`` writes it, drawn from ``rng``."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def kv_context(pairs: list[tuple[str, str]]) -> str:
    """The source's JSON text: ``JSON data:\\n{"k": "v", "k": "v"}``."""
    return "JSON data:\n{" + ", ".join(f'"{k}": "{v}"' for k, v in pairs) + "}"


def number_context(key: str, before: int, total: int) -> str:
    return NOISE * before + NUMBER_NEEDLE.replace("{key}", key) + NOISE * (total - before)


# -- the source's scorers (compute_scores.py) ------------------------------------------------------


def first_int_match(prediction: str) -> str:
    """The first run of digits in ``prediction`` ("" when none)."""
    for item in re.split("[^0-9]", prediction):
        if item != "":
            return item
    return ""


def score_number_string(prediction: str, label: str) -> float:
    """get_score_one_number_string: the first run of digits equals the label."""
    return float(label == first_int_match(prediction))


def score_kv_retrieval(prediction: str, label: str) -> float:
    """get_score_one_kv_retrieval: the label is one of the output's words after
    ``\\n : " ' . , ? ! { }`` become spaces."""
    for c in ["\n", ":", '"', "'", ".", ",", "?", "!", "{", "}"]:
        prediction = prediction.replace(c, " ")
    return float(label in prediction.split())


SCORERS = {"number_string": score_number_string, "kv_retrieval": score_kv_retrieval}


def score(task: str, prediction: str, answers) -> float:
    return SCORERS[task](prediction, answers[0])


# -- prompts of a length --------------------------------------------------------------------------


def _text(task: str, context: str, key: str) -> tuple[str, str]:
    """(body, answer prefix) of a prompt."""
    if task == "number_string":
        return TEMPLATE.format(instruction=NUMBER_INSTRUCTION, context=context, input=NUMBER_QUESTION), NUMBER_PREFIX
    return TEMPLATE.format(instruction=KV_INSTRUCTION, context=context, input=KV_QUESTION.format(key=key)), ""


def _ids(tokenizer, fr: Frame, body: str, prefix: str) -> list[int]:
    return list(fr.head) + encode(tokenizer, body + fr.between + prefix)


def build(task: str, tokenizer, fr: Frame, length: int, seed: int, trial: int) -> Prompt:
    """Trial ``trial`` of ``task`` at ``length``: the most noise lines (pairs) that fit."""
    rng = random.Random(f"infinitebench|{task}|{seed}|{length}|{trial}")
    budget = length - MAX_NEW_TOKENS[task]
    if task == "number_string":
        key = number_key(rng)
        place = rng.random()

        def make(n: int):
            j = round(place * n)
            body, prefix = _text(task, number_context(key, j, n), key)
            return body, prefix, {"key": key, "noise_lines": n, "needle_line": j}

        answer = key
    else:
        pool: list[tuple[str, str]] = []
        place = rng.random()

        def make(n: int):
            while len(pool) < n:
                pool.append((uuid_string(rng), uuid_string(rng)))
            asked = min(n - 1, int(place * n))
            body, prefix = _text(task, kv_context(pool[:n]), pool[asked][0])
            return body, prefix, {"key": pool[asked][0], "pairs": n, "asked_index": asked}

    def size(n: int) -> int:
        body, prefix, _ = make(n)
        return len(_ids(tokenizer, fr, body, prefix))

    lo = 1 if task == "kv_retrieval" else 0
    if size(lo) > budget:
        raise TooShort(f"InfiniteBench {task}", length, size(lo) + MAX_NEW_TOKENS[task])
    # the largest n that fits: grow an upper bracket, then bisect (the size only grows with n)
    hi = max(lo + 1, 8)
    while size(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if size(mid) <= budget else (lo, mid)
    body, prefix, extra = make(lo)
    if task == "kv_retrieval":
        answer = pool[extra["asked_index"]][1]
    ids = _ids(tokenizer, fr, body, prefix)
    needle = body.find(answer)  # where the answer's line starts, in characters, for people
    extra = {**extra, "depth": round(needle / max(1, len(body)), 4)}
    return Prompt(tuple(ids), (answer,), MAX_NEW_TOKENS[task], task, extra=extra)
