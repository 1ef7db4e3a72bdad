"""BABILong qa1-qa5 (Kuratov et al., 2024, "BABILong: Testing the Limits of LLMs with Long Context
Reasoning-in-a-Haystack", arXiv 2406.10149; booydar/babilong): bAbI's reasoning stories (Weston et
al., 2015, arXiv 1502.05698) hidden among background sentences. No model and no torch here.

Stories (offline, bAbI-style, from a generator seeded by (variant, seed, length, trial)): four
people (qa5: Bill, Fred, Jeff, Mary), bAbI's six rooms and three objects, bAbI's verbs.

- ``qa1`` single supporting fact: people move; "Where is P?" -> P's last room.
- ``qa2`` two supporting facts: people move, get and drop objects; "Where is the O?" -> the room
  of its carrier, or where it was dropped.
- ``qa3`` three supporting facts: "Where was the O before the R?" -> the room the object was in
  before it was carried into R (its last move).
- ``qa4`` two argument relations: "The A is north of the B." twice; "What is north of the B?" or
  "What is the A north of?".
- ``qa5`` three argument relations: people pick up objects and give them; "Who gave the O?",
  "Who received the O?", "What did P give to Q?" or "Who did P give the O to?" about the last gift.

Background: sentences of the essay haystack (default the pydoc prose of
:mod:`ctxbench.synthetic.haystack`; ``--haystack essays`` for Paul Graham's, as RULER's niah), from
a random sentence on, the story's facts inserted in order between them at random places, as
BABILong's ``NoiseInjectionDataset`` does with PG-19. Length (``length_of``): ``context``
(default), BABILong's own: the context -- facts and background sentences, tokenised alone -- is
the length (as many whole sentences as keep it within it; BABILong cuts its last sentence's tokens
to hit it exactly), the instruction, examples and question come on top; ``prompt``: as many whole
background sentences as let the whole prompt plus 20 new tokens (BABILong's generation budget)
fit (RULER's accounting, every run before ``--length-of``).

Prompt (``prompts``): BABILong's ``DEFAULT_TEMPLATE`` with its ``DEFAULT_PROMPTS`` (instruction,
in-context examples, post prompt), word for word, as ``get_formatted_input`` formats them:
``current`` (default; ``babilong/prompts.py`` at 7a6efee, last changed in ffa075f, 2024-08-21:
blank lines between the sections, five strings fixed, the context stripped; :data:`PROMPTS`) or
``2024-05`` (its first version, d796183, 2024-05-15; :data:`PROMPTS_2024_05`).

Scorers (:func:`strict`, :func:`lenient`): the official ``compare_answers`` of babilong/metrics.py
(the first sentence of the output must name the target and no other of the task's labels, labels
named in the question not counted) and lm-evaluation-harness's ``process_results`` (the target
occurs anywhere in the output, case-insensitive).

Published files (:func:`read_records`): the rows of BABILong's released data (``RMT-team/babilong``
on the hub, a config per length and a split per task) as JSON or JSON lines with ``input`` (the
context), ``question`` and ``target``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from ctxbench.parsing import json_rows
from ctxbench.synthetic.haystack import Haystack, sentences
from ctxbench.synthetic.pieces import Frame, Prompt, TooShort, encode

VARIANTS = ("qa1", "qa2", "qa3", "qa4", "qa5")
MAX_NEW_TOKENS = 20
PROMPT_VERSIONS = ("current", "2024-05")  # booydar/babilong prompts.py at 7a6efee (current) and at d796183 (its first version)
LENGTH_OF = ("context", "prompt")
# babilong/prompts.py DEFAULT_TEMPLATE (TASK_TEMPLATE + USER_TEMPLATE) at 7a6efee
TEMPLATE = "{instruction}\n\n{examples}\n\n{post_prompt}\n\n<context>\n{context}\n</context>\n\nQuestion: {question}"
# babilong/prompts.py DEFAULT_TEMPLATE at d796183 (2024-05-15)
TEMPLATE_2024_05 = "{instruction}\n{examples}\n{post_prompt}\n<context>\n{context}\n</context>\nQuestion: {question}"

# babilong/prompts.py DEFAULT_PROMPTS (qa1-qa5) at d796183, word for word (typos included)
PROMPTS_2024_05 = {
    "qa1": {
        "instruction": "I will give you context with the facts about positions of different persons hidden in some random text "
        "and a question. You need to answer the question based only on the information from the facts. "
        "If a person was in different locations, use the latest location to answer the question.",
        "examples": "<example>\nCharlie went to the hallway. Judith come back to the kitchen. Charlie travelled to balcony. "
        "Where is Charlie?\nAnswer: The most recent location of Charlie is balcony.\n</example>\n\n"
        "<example>\nAlan moved to the garage. Charlie went to the beach. Alan went to the shop. Rouse "
        "travelled to balcony. Where is Alan?\nAnswer: The most recent location of Alan is shop.\n</example>",
        "post_prompt": "Always return your answer in the following format: "
        "The most recent location of \u2019person\u2019 is \u2019location\u2019. Do not write anything else after that. ",
    },
    "qa2": {
        "instruction": "I give you context with the facts about locations and actions of different persons "
        "hidden in some random text and a question."
        "You need to answer the question based only on the information from the facts.\n"
        "If a person got an item in the first location and travelled to the second location "
        "the item is also in the second location. "
        "If a person dropped an item in the first location and moved to the second location "
        "the item remains in the first location.",
        "examples": "<example>\nCharlie went to the kitchen. Charlie got a bottle. Charlie moved to the balcony. "
        "Where is the bottle?\nAnswer: The bottle is in the balcony.\n</example>\n"
        "<example>\nAlan moved to the garage. Alan got a screw driver. Alan moved to the kitchen. Where "
        "is the screw driver?\nAnswer: The screw driver is in the kitchen.\n</example>",
        "post_prompt": "Always return your answer in the following format: The \u2019item\u2019 is in \u2019location\u2019. "
        "Do not write anything else after that.",
    },
    "qa3": {
        "instruction": "I give you context with the facts about locations and actions of different persons "
        "hidden in some random text and a question. "
        "You need to answer the question based only on the information from the facts.\n"
        "If a person got an item in the first location and travelled to the second location "
        "the item is also in the second location. "
        "If a person dropped an item in the first location and moved to the second location "
        "the item remains in the first location",
        "examples": "<example>\nJohn journeyed to the bedroom.Mary grabbed the apple. Mary went back to the bathroom. "
        "Daniel journeyed to the bedroom. Daniel moved to the garden. Mary travelled to the kitchen. "
        "Where was the apple before the kitchen?\nAnswer: Before the kitchen the apple was in the bathroom.\n</example>\n"
        "<example>\nJohn went back to the bedroom. John went back to the garden. John went back to the kitchen. "
        "Sandra took the football. Sandra travelled to the garden. Sandra journeyed to the bedroom. "
        "Where was the football before the bedroom?\nAnswer: Before the kitchen the football was in the garden.\n</example>",
        "post_prompt": "Always return your answer in the following format: "
        "Before the $location_1& the $item$ was in the $location_2$. Do not write anything else after that.",
    },
    "qa4": {
        "instruction": "I will give you context with the facts about different people, their location and actions, hidden in "
        "some random text and a question. "
        "You need to answer the question based only on the information from the facts.",
        "examples": "<example>\nThe hallway is south of the kitchen. The bedroom is north of the kitchen. "
        "What is the kitchen south of?\nAnswer: bedroom\n</example>\n"
        "<example>\nThe garden is west of the bedroom. The bedroom is west of the kitchen. What is west of the bedroom?\n"
        "Answer: garden\n</example>",
        "post_prompt": "Your answer should contain only one word - location. Do not write anything else after that.",
    },
    "qa5": {
        "instruction": "I will give you context with the facts about locations and their relations hidden in some random text "
        "and a question. You need to answer the question based only on the information from the facts.",
        "examples": "<example>\nMary picked up the apple there. Mary gave the apple to Fred. Mary moved to the bedroom. "
        "Bill took the milk there. Who did Mary give the apple to?\nAnswer: Fred\n</example>\n"
        "<example>\nJeff took the football there. Jeff passed the football to Fred. Jeff got the milk there. "
        "Bill travelled to the bedroom. Who gave the football?\nAnswer: Jeff\n</example>\n"
        "<example>\nFred picked up the apple there. Fred handed the apple to Bill. Bill journeyed to the bedroom. "
        "Jeff went back to the garden. What did Fred give to Bill?\nAnswer: apple\n</example>",
        "post_prompt": "Your answer should contain only one word. Do not write anything else after that. "
        "Do not explain your answer.",
    },
}

# babilong/prompts.py DEFAULT_PROMPTS (qa1-qa5) at 7a6efee: the first version with its five fixes
# (commits 876cf31, 2024-05-22, and c9c6ad2, 2024-06-05)
PROMPTS = {v: dict(p) for v, p in PROMPTS_2024_05.items()}
PROMPTS["qa1"]["post_prompt"] = PROMPTS_2024_05["qa1"]["post_prompt"].rstrip(" ")
PROMPTS["qa3"]["instruction"] = PROMPTS_2024_05["qa3"]["instruction"] + "."
PROMPTS["qa3"]["examples"] = (PROMPTS_2024_05["qa3"]["examples"].replace("bedroom.Mary", "bedroom. Mary")
                              .replace("Answer: Before the kitchen the football", "Answer: Before the bedroom the football"))  # fmt: skip
PROMPTS["qa3"]["post_prompt"] = PROMPTS_2024_05["qa3"]["post_prompt"].replace("$location_1&", "$location_1$")
VERSIONS = {"current": (TEMPLATE, PROMPTS, True), "2024-05": (TEMPLATE_2024_05, PROMPTS_2024_05, False)}  # (template, prompts, strip the context)

# babilong/metrics.py TASK_LABELS
TASK_LABELS = {
    "qa1": {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"},
    "qa2": {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"},
    "qa3": {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"},
    "qa4": {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"},
    "qa5": {"Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"},
}

PEOPLE = ("Mary", "John", "Daniel", "Sandra")
GIVERS = ("Bill", "Fred", "Jeff", "Mary")
ROOMS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
OBJECTS = ("apple", "football", "milk")
MOVES = ("moved to", "went to", "journeyed to", "travelled to", "went back to")
GETS = ("got", "grabbed", "picked up", "took")
DROPS = ("dropped", "discarded", "put down", "left")
GIVES = ("gave", "handed", "passed")
DIRECTIONS = {"north": "south", "south": "north", "east": "west", "west": "east"}


@dataclass(frozen=True)
class Story:
    facts: tuple[str, ...]
    question: str
    answer: str


# -- bAbI-style stories ----------------------------------------------------------------------------


def _move(rng, where: dict, people) -> str:
    p = rng.choice(people)
    room = rng.choice([r for r in ROOMS if r != where.get(p)])
    where[p] = room
    return f"{p} {rng.choice(MOVES)} the {room}."


def _qa1(rng: random.Random) -> Story:
    where: dict = {}
    facts = [_move(rng, where, PEOPLE) for _ in range(rng.randint(4, 10))]
    p = rng.choice(sorted(where))
    return Story(tuple(facts), f"Where is {p}?", where[p])


def _carry_story(rng: random.Random, want_history: bool) -> tuple[list[str], str, str | None, dict[str, list[str]]]:
    """People move, get and drop objects (qa2, qa3); returns the facts, the asked object, its
    room (where it is now) and the rooms it was in, in order."""
    where: dict = {p: None for p in PEOPLE}
    held: dict = {}  # object -> person
    at: dict = {}  # object -> room where it lies (dropped)
    path: dict = {o: [] for o in OBJECTS}  # rooms each object has been in
    facts: list[str] = []

    def visit(o, room):
        if room is not None and (not path[o] or path[o][-1] != room):
            path[o].append(room)

    steps = rng.randint(8, 14)
    target = rng.choice(OBJECTS)
    def now():
        return where[held[target]] if target in held else at.get(target)

    for i in range(200):
        if i >= steps and now() is not None and (not want_history or len(path[target]) >= 2):
            break
        kind = rng.random()
        free = [o for o in OBJECTS if o not in held]
        here = [p for p in PEOPLE if where[p] is not None]
        if kind < 0.25 and free and here:  # get an object lying where the person is (or not yet placed)
            p = rng.choice(here)
            options = [o for o in free if at.get(o) in (None, where[p])]
            if options:
                o = target if target in options and rng.random() < 0.6 else rng.choice(options)
                held[o] = p
                at.pop(o, None)
                visit(o, where[p])
                facts.append(f"{p} {rng.choice(GETS)} the {o} there.")
                continue
        if kind < 0.35 and held:
            o = rng.choice(sorted(held))
            p = held.pop(o)
            at[o] = where[p]
            facts.append(f"{p} {rng.choice(DROPS)} the {o}.")
            continue
        facts.append(_move(rng, where, PEOPLE))
        for o, p in held.items():
            visit(o, where[p])
    return facts, target, now(), path


def _qa2(rng: random.Random) -> Story:
    while True:
        facts, o, now, _ = _carry_story(rng, want_history=False)
        if now is not None:
            return Story(tuple(facts), f"Where is the {o}?", now)


def _qa3(rng: random.Random) -> Story:
    while True:
        facts, o, _, path = _carry_story(rng, want_history=True)
        rooms = path[o]
        if len(rooms) >= 2:
            return Story(tuple(facts), f"Where was the {o} before the {rooms[-1]}?", rooms[-2])


def _qa4(rng: random.Random) -> Story:
    a, b, c = rng.sample(ROOMS, 3)
    d = rng.choice(sorted(DIRECTIONS))
    facts = [f"The {a} is {d} of the {b}.", f"The {b} is {d} of the {c}."] if rng.random() < 0.5 else \
            [f"The {b} is {d} of the {c}.", f"The {a} is {d} of the {b}."]  # fmt: skip
    x, y = (a, b) if rng.random() < 0.5 else (b, c)  # the asked fact: x is d of y
    if rng.random() < 0.5:
        return Story(tuple(facts), f"What is {d} of the {y}?", x)
    return Story(tuple(facts), f"What is the {x} {d} of?", y)


def _qa5(rng: random.Random) -> Story:
    where: dict = {}
    held: dict = {}
    facts: list[str] = []
    last: tuple[str, str, str] | None = None  # (giver, object, receiver) of the latest give
    for i in range(60):
        if last is not None and i >= rng.randint(6, 12):
            break
        kind = rng.random()
        holders = sorted(set(held.values()))
        if kind < 0.35 and holders:
            g = rng.choice(holders)
            o = rng.choice(sorted(o for o, p in held.items() if p == g))
            r = rng.choice([p for p in GIVERS if p != g])
            held[o] = r
            facts.append(f"{g} {rng.choice(GIVES)} the {o} to {r}.")
            last = (g, o, r)
            continue
        free = [o for o in OBJECTS if o not in held]
        if kind < 0.65 and free:
            p, o = rng.choice(GIVERS), rng.choice(free)
            held[o] = p
            facts.append(f"{p} {rng.choice(GETS)} the {o} there.")
            continue
        facts.append(_move(rng, where, GIVERS))
    assert last is not None  # (60 steps always hold a give)
    g, o, r = last
    kind = rng.randrange(4)
    question, answer = [(f"Who gave the {o}?", g), (f"Who received the {o}?", r), (f"What did {g} give to {r}?", o),
                        (f"Who did {g} give the {o} to?", r)][kind]  # fmt: skip
    return Story(tuple(facts), question, answer)


STORIES = {"qa1": _qa1, "qa2": _qa2, "qa3": _qa3, "qa4": _qa4, "qa5": _qa5}


def story(variant: str, rng: random.Random) -> Story:
    return STORIES[variant](rng)


# -- the two scorers --------------------------------------------------------------------------------


def preprocess_output(output: str) -> str:
    """babilong/metrics.py ``preprocess_output``: lower-cased, the first sentence, cut at an echoed
    ``<context>``/``<example>`` (and at ``Question``, which after lower-casing never matches: kept
    as the source has it)."""
    output = output.lower()
    output = output.split(".")[0]
    output = output.split("<context>")[0]
    output = output.split("<example>")[0]
    output = output.split("Question")[0]
    return output


def strict(output: str, target: str, question: str, variant: str) -> float:
    """babilong/metrics.py ``compare_answers``: the target is the only label (of the task's) named
    in the output's first sentence, labels the question names not counted."""
    output = preprocess_output(output)
    target = target.lower()
    labels = {label.lower() for label in TASK_LABELS[variant]}
    in_question = {label for label in labels if label in question.lower()}
    in_output = {label for label in labels if label in output} - in_question
    return float(target in in_output and len(in_output) == 1)


def lenient(output: str, target: str) -> float:
    """lm-evaluation-harness babilong ``process_results``: the target occurs in the output (control
    characters made newlines, stripped; case-insensitive)."""
    pred = re.sub(r"[\x00-\x1f]", "\n", output.strip()).strip()
    return 1.0 if target.strip().lower() in pred.lower() else 0.0


# -- prompts ----------------------------------------------------------------------------------------


def formatted(variant: str, context: str, question: str, prompts: str = "current") -> str:
    """babilong/prompts.py ``get_formatted_input`` with the task's default prompts of version ``prompts``."""
    template, table, strip = VERSIONS[prompts]
    p = table[variant]
    return template.format(instruction=p["instruction"], examples=p["examples"], post_prompt=p["post_prompt"],
                           context=context.strip() if strip else context, question=question).strip()  # fmt: skip


def _ids(tokenizer, fr: Frame, text: str) -> list[int]:
    return list(fr.head) + encode(tokenizer, text + fr.between)


def build(variant: str, tokenizer, fr: Frame, haystack: Haystack, length: int, seed: int, trial: int,
          prompts: str = "current", length_of: str = "context") -> Prompt:
    """Trial ``trial`` of ``variant`` at ``length``: the story's facts among as many whole background
    sentences as keep the context within ``length`` tokens (``length_of="context"``), or the whole
    prompt with BABILong's 20 new tokens (``"prompt"``)."""
    rng = random.Random(f"babilong|{variant}|{seed}|{length}|{trial}")
    s = story(variant, rng)
    background = sentences(haystack.text)
    start = rng.randrange(len(background))
    places = sorted(rng.random() for _ in s.facts)
    budget = length - MAX_NEW_TOKENS if length_of == "prompt" else length

    def context(k: int) -> str:
        noise = [background[(start + i) % len(background)] for i in range(k)]
        parts: list[str] = []
        cut = [round(f * k) for f in places]
        fi = 0
        for i in range(k + 1):
            while fi < len(cut) and cut[fi] == i:
                parts.append(s.facts[fi])
                fi += 1
            if i < k:
                parts.append(noise[i])
        return " ".join(parts)

    def text(k: int) -> str:
        return formatted(variant, context(k), s.question, prompts)

    def size(k: int) -> int:
        if length_of == "context":
            return len(encode(tokenizer, context(k)))
        return len(_ids(tokenizer, fr, text(k)))

    if size(0) > budget:
        raise TooShort(f"BABILong {variant}", length, size(0) + (MAX_NEW_TOKENS if length_of == "prompt" else 0))
    lo, hi = 0, 16
    while size(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if size(mid) <= budget else (lo, mid)
    ids = _ids(tokenizer, fr, text(lo))
    return Prompt(tuple(ids), (s.answer,), MAX_NEW_TOKENS,
                  extra={"question": s.question, "facts": list(s.facts), "background_sentences": lo,
                         "context_tokens": len(encode(tokenizer, context(lo)))})  # fmt: skip


def from_record(variant: str, tokenizer, fr: Frame, record: dict, prompts: str = "current") -> Prompt:
    """A prompt of a published row (``input``, ``question``, ``target``), as BABILong formats it."""
    ids = _ids(tokenizer, fr, formatted(variant, record["input"], record["question"], prompts))
    return Prompt(tuple(ids), (record["target"],), MAX_NEW_TOKENS, extra={"question": record["question"]})


class BadRecords(ValueError):
    """What is wrong with a published file, for one line naming it and the field."""


def read_records(raw: bytes, where: str) -> list[dict]:
    """The rows of a published BABILong file: a JSON list or JSON lines of objects with string
    fields ``input``, ``question`` and ``target``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRecords(f"{where} is not UTF-8 text") from None
    text = text.lstrip("\ufeff")
    if not text.strip():
        raise BadRecords(f"{where} is empty")
    try:
        rows = json_rows(text)
    except ValueError as exc:
        raise BadRecords(f"{where} is not JSON or JSON lines ({str(exc)[:80]})") from None
    if isinstance(rows, dict) or not rows:
        raise BadRecords(f"{where} holds no rows (expected a list of {{input, question, target}})")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise BadRecords(f"{where} row {i} is not an object with input, question and target")
        for key in ("input", "question", "target"):
            if not isinstance(row.get(key), str) or (key != "input" and not row[key].strip()):
                raise BadRecords(f"{where} row {i} has no {key!r} string (BABILong's rows hold input, question and target)")
    return rows
