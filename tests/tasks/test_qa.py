"""RULER's qa_1 / qa_2 (``ctxbench qa``) over small fixtures in the official files' layouts
(tests/data/qa, invented text): RULER's reading of SQuAD and HotpotQA, its prompt word for word,
its document draw and length accounting, string_match_part, rows with intervals, identical
prompts for every method, and bad --qa-data as one line before any model loads."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

import pytest
from helpers import DATA, byte_tokenizer, expanded_forwards, run_settings, scripted_lm

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic.metrics import score, string_match_part
from ctxbench.synthetic.qa import build_qa, documents, load_qa, parse_spec
from ctxbench.tasks import get

DATA = DATA / "qa"
SQUAD = DATA / "squad-dev-v2.0-mini.json"
HOTPOT = DATA / "hotpot-dev-distractor-mini.json"
FILES = {"qa_1": SQUAD, "qa_2": HOTPOT}
INSTRUCTION = "Answer the question based on the given documents. Only give me the answer and do not output any other words."
CHAT = "{% for m in messages %}[U]{{ m['content'] }}[/U]{% endfor %}{% if add_generation_prompt %}[A]{% endif %}"


def reference(docs: list[str], query: str, chat: bool = False) -> str:
    """RULER's qa prompt by plain string formatting (constants.py template + answer prefix)."""
    context = "\n\n".join(f"Document {i}:\n{d}" for i, d in enumerate(docs, start=1))
    body = f"{INSTRUCTION}\n\nThe following are given documents.\n\n{context}\n\n{INSTRUCTION}\n\nQuestion: {query}"
    return f"[U]{body}[/U][A] Answer:" if chat else f"{body} Answer:"


def tokenizer(chat: bool):
    tok = byte_tokenizer()
    if chat:
        tok.chat_template = CHAT
    return tok


def _settings(methods=("none",), lengths="1500", **options):
    options.setdefault("qa_data", str(SQUAD))
    options.setdefault("doc_count", "largest")  # these tests script answers to build_qa's prompts (RULER's count: test_qa_ruler_reference.py)
    return build_settings(get("qa"), [resolve(m) for m in methods], 2.0, lengths, options)


# -- reading the official formats ---------------------------------------------------------------


def test_squad_is_read_as_ruler_reads_it():
    raw = json.loads(SQUAD.read_text())
    data = load_qa("qa_1", str(SQUAD))
    paragraphs = [p for a in raw["data"] for p in a["paragraphs"]]
    answerable = [(qa, p) for p in paragraphs for qa in p["qas"] if not qa["is_impossible"]]
    assert len(answerable) == 35 and len(data.questions) == 35  # the 4 unanswerable ones are left out
    assert list(data.docs) == sorted({p["context"] for p in paragraphs})
    for q, (qa, p) in zip(data.questions, answerable, strict=True):  # file order, every annotator's answer
        assert q.query == qa["question"] and list(q.answers) == [a["text"] for a in qa["answers"]]
        assert [data.docs[i] for i in q.gold] == [p["context"]]
        article = next(a for a in raw["data"] if p in a["paragraphs"])
        assert sorted(data.docs[i] for i in q.more) == sorted(x["context"] for x in article["paragraphs"] if x is not p)


def test_hotpotqa_is_read_as_ruler_reads_it():
    raw = json.loads(HOTPOT.read_text())
    data = load_qa("qa_2", str(HOTPOT))
    assert len(data.questions) == 20
    assert list(data.docs) == sorted({f"{t}\n{''.join(s)}" for item in raw for t, s in item["context"]})
    for q, item in zip(data.questions, raw, strict=True):
        assert (q.query, q.answers, q.more) == (item["question"], (item["answer"],), ())
        assert [data.docs[i] for i in q.gold] == [f"{t}\n{''.join(s)}" for t, s in item["context"]]
    assert data.docs[data.questions[0].gold[0]].startswith("Harlan Voss\nHarlan Voss (1881")


def test_the_digest_is_of_the_parsed_data_not_the_files_bytes(tmp_path):
    again = tmp_path / "reformatted.json"
    again.write_text(json.dumps(json.loads(SQUAD.read_text()), indent=2))  # other bytes, same content
    assert load_qa("qa_1", str(again)).digest == load_qa("qa_1", str(SQUAD)).digest
    changed = json.loads(SQUAD.read_text())
    changed["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = "Tobias"
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    assert load_qa("qa_1", str(tmp_path / "changed.json")).digest != load_qa("qa_1", str(SQUAD)).digest


def test_a_hub_id_is_read_through_datasets_into_the_same_data(monkeypatch):
    import datasets

    from ctxbench.synthetic import qa as qa_module

    raw = json.loads(SQUAD.read_text())
    squad_rows = [{"id": qa["id"], "title": a["title"], "context": p["context"], "question": qa["question"],
                   "answers": {"text": [x["text"] for x in qa["answers"]], "answer_start": [x["answer_start"] for x in qa["answers"]]}}
                  for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]]  # fmt: skip
    hotpot_rows = [{"id": item["_id"], "question": item["question"], "answer": item["answer"],
                    "context": {"title": [t for t, _ in item["context"]], "sentences": [s for _, s in item["context"]]}}
                   for item in json.loads(HOTPOT.read_text())]  # fmt: skip
    calls = []

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return datasets.Dataset.from_list(squad_rows if "squad" in name else hotpot_rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    qa_module._load_hub.cache_clear()
    assert load_qa("qa_1", "rajpurkar/squad_v2").digest == load_qa("qa_1", str(SQUAD)).digest
    assert load_qa("qa_2", "hotpotqa/hotpot_qa:distractor").digest == load_qa("qa_2", str(HOTPOT)).digest
    assert calls == [("rajpurkar/squad_v2", None, "validation"), ("hotpotqa/hotpot_qa", "distractor", "validation")]
    qa_module._load_hub.cache_clear()


# -- the prompt ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["qa_1", "qa_2"])
@pytest.mark.parametrize("chat", [False, True])
def test_the_prompt_is_rulers_template_word_for_word(variant, chat):
    tok = tokenizer(chat)
    data = load_qa(variant, str(FILES[variant]))
    for length, trial in ((1500, 0), (3000, 2), (6000, 5)):
        p = build_qa(data, tok, length, seed=3, trial=trial, chat=chat)
        q = data.questions[trial]
        docs = [data.docs[i] for i in p.extra["doc_ids"]]
        assert tok.decode(list(p.ids)) == reference(docs, q.query, chat)
        assert p.answers == q.answers and p.max_new_tokens == 32 and p.metric == "string_match_part"
        assert p.extra["docs"] == len(docs) and [docs[i - 1] for i in p.extra["gold_docs"]] == [d for d in docs if d in {data.docs[g] for g in q.gold}]
        assert p.extra["doc_ids"] == documents(data, 3, length, trial, len(docs))


def test_distractors_are_drawn_as_ruler_draws_them():
    squad = load_qa("qa_1", str(SQUAD))
    q = squad.questions[0]
    assert len(q.more) == 3
    # few documents: the gold one and a sample of its article's other paragraphs
    for n in (2, 3, 4):
        ids = documents(squad, 0, 3000, 0, n)
        assert Counter(ids)[q.gold[0]] == 1 and set(ids) - set(q.gold) <= set(q.more) and len(set(ids)) == n
    # a random sample of them (RULER's random.sample), drawn anew per seed, length and trial
    picked = {next(i for i in documents(squad, seed, 3000, 0, 2) if i != q.gold[0]) for seed in range(20)}
    assert picked == set(q.more)
    # more than the article holds: all of it, then a sample of the other documents
    ids = documents(squad, 0, 3000, 0, 7)
    assert set(q.gold) | set(q.more) <= set(ids) and len(set(ids)) == 7
    # as many as there are documents or more: every document, repeated, nothing left out
    for n in (16, 19, 40):
        assert Counter(documents(squad, 0, 3000, 0, n)) == Counter((list(range(16)) * 3)[:n])
    hotpot = load_qa("qa_2", str(HOTPOT))
    g = hotpot.questions[4].gold
    ids = documents(hotpot, 0, 3000, 4, len(g) + 3)
    assert Counter(ids) - Counter(g) == Counter(i for i in ids if i not in g) and len(set(ids) - set(g)) == 3


def test_the_searchs_estimate_counts_the_texts_characters_exactly():
    from ctxbench.synthetic import qa as qa_module

    for variant in ("qa_1", "qa_2"):
        data = load_qa(variant, str(FILES[variant]))
        for trial in (0, 7):
            q = data.questions[trial]
            for n in range(len(q.gold), 45):
                draw = qa_module._Draw(data, q, qa_module._trial_rng(data, 0, 3000, trial))
                assert draw.chars(n) == sum(len(data.docs[i]) for i in draw.chosen(n))
    assert [qa_module._digits(n) for n in (0, 9, 10, 99, 100, 1234)] == [len("".join(map(str, range(1, n + 1)))) for n in (0, 9, 10, 99, 100, 1234)]


def test_the_shuffle_depends_on_the_count_not_the_trial_as_in_ruler():
    # RULER shuffles each sample's list with random.Random(random_seed): the gold document(s),
    # first in the list, land at the same numbers for every sample with the same count.
    squad = load_qa("qa_1", str(SQUAD))
    for n in (3, 9, 12):
        places = {documents(squad, 0, 3000, t, n).index(squad.questions[t].gold[0]) for t in range(6)}
        assert len(places) == 1
    spots = {documents(squad, 0, 3000, 0, 12).index(squad.questions[0].gold[0]) for _ in range(3)}
    assert len(spots) == 1
    # but the distractors are the trial's own
    assert len({tuple(sorted(documents(squad, 0, 3000, t, 12))) for t in range(6)}) > 1


def _tokens(tok, text: str, chat: bool) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("variant", ["qa_1", "qa_2"])
@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("length", [1500, 3000, 6000])
def test_prompt_plus_32_fits_and_one_more_document_does_not(variant, chat, length):
    tok = tokenizer(chat)
    data = load_qa(variant, str(FILES[variant]))
    for trial in range(4):
        p = build_qa(data, tok, length, seed=0, trial=trial, chat=chat)
        n, q = p.extra["docs"], data.questions[trial]
        assert len(p.ids) + 32 <= length
        assert len(p.ids) == _tokens(tok, reference([data.docs[i] for i in documents(data, 0, length, trial, n)], q.query, chat), chat)
        more = reference([data.docs[i] for i in documents(data, 0, length, trial, n + 1)], q.query, chat)
        assert _tokens(tok, more, chat) + 32 > length, (trial, n)
        # and within one document's room of the length
        assert length - 32 - len(p.ids) < len(f"\n\nDocument {n + 1}:\n") + max(map(len, data.docs))


def test_accounting_with_a_real_bpe_tokenizer():
    from transformers import AutoTokenizer

    from ctxbench.model.files import ALIASES

    path = ALIASES["smollm2-135m"]()  # only the tokenizer, read from the GGUF file
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for variant in ("qa_1", "qa_2"):
        data = load_qa(variant, str(FILES[variant]))
        for length in (1000, 4096):
            for chat in (False, True):
                p = build_qa(data, tok, length, seed=0, trial=1, chat=chat)
                n = p.extra["docs"]
                assert len(p.ids) + 32 <= length
                head = tok.apply_chat_template([{"role": "user", "content": "\u2063"}], tokenize=False, add_generation_prompt=True)
                start, end = head.split("\u2063") if chat else ("", "")

                def count(k, start=start, end=end, data=data, length=length):
                    body = reference([data.docs[i] for i in documents(data, 0, length, 1, k)], data.questions[1].query)
                    text = start + body[: -len(" Answer:")] + end + " Answer:"
                    return len(tok(start, add_special_tokens=False)["input_ids"]) + len(tok(text[len(start):], add_special_tokens=False)["input_ids"])

                assert count(n) == len(p.ids) and count(n + 1) + 32 > length


@pytest.mark.parametrize("variant,trial", [("qa_1", 0), ("qa_2", 4), ("qa_2", 16)])
def test_the_shortest_length_holds_the_gold_documents_alone(variant, trial):
    from ctxbench.synthetic import TooShort

    tok, data = byte_tokenizer(), load_qa(variant, str(FILES[variant]))
    q = data.questions[trial]
    need = len(reference([data.docs[i] for i in q.gold], q.query)) + 32  # bytes are tokens
    p = build_qa(data, tok, need, trial=trial)
    assert p.extra["docs"] == len(q.gold) and sorted(p.extra["doc_ids"]) == sorted(q.gold) and len(p.ids) + 32 == need
    with pytest.raises(TooShort) as info:
        build_qa(data, tok, need - 1, trial=trial)
    assert info.value.minimum == need


def test_too_short_and_too_many_trials_are_user_errors(tiny_lm):
    data = load_qa("qa_2", str(HOTPOT))
    with pytest.raises(UserError, match="shorter than the RULER qa_2 prompt's fixed text"):
        build_qa(data, byte_tokenizer(), 300, trial=0)
    with pytest.raises(UserError, match="too short for qa qa_2 .* use --len of at least"):
        get("qa").prepare(tiny_lm, _settings(lengths="600", qa_data=str(HOTPOT), variants="qa_2"))
    with pytest.raises(UserError, match="--trials 21 is more than the 20 answerable questions"):
        _settings(qa_data=str(HOTPOT), variants="qa_2", trials=21)


# -- scoring ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction,answers,expected",
    [
        (" Tobias Quell", ["Tobias Quell", "the engineer Tobias Quell"], 1.0),
        ("It was designed by THE ENGINEER tobias quell.", ["the engineer Tobias Quell"], 1.0),
        ("castren grey goats", ["the Castren grey", "Castren grey"], 1.0),  # any one answer is enough
        ("Castren", ["the Castren grey", "Castren grey"], 0.0),  # a part of an answer is not
        ("", ["1843"], 0.0),
        ("18 43", ["1843"], 0.0),
        ("\x00Tobias\x01Quell", ["Tobias Quell"], 0.0),  # control characters become newlines first
        ("  yes\n", ["yes"], 1.0),
    ],
)
def test_string_match_part_by_hand(prediction, answers, expected):
    assert score("string_match_part", prediction, answers) == expected
    assert string_match_part(prediction.strip(), answers) == expected or "\x00" in prediction


def _scripted(tok, data, length, trials, answer):
    script = {}
    for t in range(trials):
        p = build_qa(data, tok, length, 0, t)
        script[p.ids] = tuple(tok(answer(t, p.answers), add_special_tokens=False)["input_ids"])
    return scripted_lm(tok, script)


def test_scores_and_accuracy_rows_with_wilson_intervals(tokenizer):
    from ctxbench.stats import wilson

    data = load_qa("qa_1", str(SQUAD))
    # trials 0-2 answer with one of the gold answers (in other case), trial 3 with a wrong one
    lm = _scripted(tokenizer, data, 1500, 4, lambda t, answers: f" {answers[-1].upper()}" if t < 3 else " Merrow Bay")
    records = run_settings(lm, "qa", _settings(trials=4)).records
    scores = [r for r in records if r["metric"] == "score"]
    assert [float(r["value"]) for r in scores] == [1.0, 1.0, 1.0, 0.0]
    assert scores[3]["answer"] == "Merrow Bay"
    assert json.loads(scores[0]["extra"])["answers"] == ["Tobias Quell", "the engineer Tobias Quell", "Tobias Quell"]
    acc = {r["metric"]: float(r["value"]) for r in records if r["trial"] == "all"}
    lo, hi = wilson(3, 4)
    assert acc == pytest.approx({"accuracy": 0.75, "accuracy_lo": lo, "accuracy_hi": hi})


def test_decoding_stops_once_an_answer_is_found(tokenizer):
    data = load_qa("qa_1", str(SQUAD))
    lm = _scripted(tokenizer, data, 1500, 2, lambda t, answers: " " + answers[0] + " and then it keeps talking" * 5)
    scores = [r for r in run_settings(lm, "qa", _settings(trials=2)).records if r["metric"] == "score"]
    assert [r["answer"] for r in scores] == [data.questions[0].answers[0], data.questions[1].answers[0]]
    lm = _scripted(tokenizer, data, 1500, 1, lambda t, answers: " nothing of the kind, and then it keeps talking" * 5)
    rows = [r for r in run_settings(lm, "qa", _settings(trials=1)).records if r["metric"] == "score"]
    assert len(tokenizer(" " + rows[0]["answer"], add_special_tokens=False)["input_ids"]) == 32  # RULER's budget


# -- the task -----------------------------------------------------------------------------------


def test_end_to_end_on_a_tiny_model_both_variants(tiny_lm):
    settings = _settings(methods=("none", "yarn"), lengths="1500", qa_data=f"qa_1={SQUAD},qa_2={HOTPOT}", trials=2)
    out = run_settings(tiny_lm, "qa", settings)
    records = out.records
    assert {(r["variant"], r["method"]) for r in records} == {(v, m) for v in ("qa_1", "qa_2") for m in ("none", "yarn")}
    r = records[0]
    assert {(x["variant"], x["dataset"]) for x in records} == {("qa_1", "ruler-qa_1:squad-dev-v2.0-mini.json"),
                                                               ("qa_2", "ruler-qa_2:hotpot-dev-distractor-mini.json")}  # fmt: skip
    assert r["task"] == "qa"
    assert json.loads(r["options"]) == {"chat": False, "protocol": "ruler", "doc_count": "largest"}
    for variant in ("qa_1", "qa_2"):
        for method in ("none", "yarn"):
            cell = [x for x in records if x["variant"] == variant and x["method"] == method]
            assert [x["metric"] for x in cell] == ["score", "score", "accuracy", "accuracy_lo", "accuracy_hi"]
            agg = {x["metric"]: float(x["value"]) for x in cell if x["trial"] == "all"}
            assert 0 <= agg["accuracy_lo"] <= agg["accuracy"] <= agg["accuracy_hi"] <= 1
            extra = json.loads(cell[0]["extra"])
            assert extra["docs"] >= 3 and extra["answers"] and extra["metric"] == "string_match_part"
    # every method saw the same prompts
    seen = {(x["variant"], x["trial"], x["tokens"], json.loads(x["extra"])["docs"], tuple(json.loads(x["extra"])["gold_docs"]))
            for x in records if x["metric"] == "score"}  # fmt: skip
    assert len(seen) == 4


def test_every_method_and_every_run_sees_the_same_prompts(tiny_lm):
    data = load_qa("qa_2", str(HOTPOT))
    tok = tiny_lm.tokenizer
    a = [build_qa(data, tok, 3000, 0, t).ids for t in range(3)]
    assert a == [build_qa(data, tok, 3000, 0, t).ids for t in range(3)]
    assert len(set(a)) == 3 and a != [build_qa(data, tok, 3000, 1, t).ids for t in range(3)]  # the seed draws others
    from ctxbench.tasks import qa as task_module

    settings = _settings(methods=("none", "yarn", "ntk"), qa_data=str(HOTPOT), variants="qa_2", trials=3, lengths="3000")
    ctx = get("qa").prepare(tiny_lm, settings)
    per_method = {m: [p.ids for p in task_module.prompts_for(tiny_lm, ctx, "qa_2", 3000, 3)] for m in ("none", "yarn", "ntk")}
    assert per_method["none"] == per_method["yarn"] == per_method["ntk"] == a


def test_the_data_digest_follows_the_data_and_the_options(tiny_lm, tmp_path):
    task = get("qa")
    base = task.prepare(tiny_lm, _settings())
    assert base.dataset == "ruler-qa_1:squad-dev-v2.0-mini.json"
    copy = tmp_path / "dev-v2.0.json"
    copy.write_text(json.dumps(json.loads(SQUAD.read_text()), indent=1))
    same = task.prepare(tiny_lm, _settings(qa_data=str(copy)))
    assert same.data_digest == base.data_digest and same.dataset == "ruler-qa_1:dev-v2.0.json"
    other = task.prepare(tiny_lm, _settings(qa_data=str(HOTPOT), variants="qa_2"))
    assert other.data_digest != base.data_digest


def test_a_variant_run_alone_is_the_same_cell_as_in_a_run_of_both(tiny_lm, tmp_path):
    out = tmp_path / "qa.csv"
    both = run_settings(tiny_lm, "qa", _settings(lengths="1500", qa_data=f"qa_1={SQUAD},qa_2={HOTPOT}", trials=1), out=out)
    assert both.ran == 2
    alone = run_settings(tiny_lm, "qa", _settings(lengths="1500", qa_data=str(HOTPOT), variants="qa_2", trials=1), out=out)
    assert alone.ran == 0 and alone.skipped == 1
    digests = {r["variant"]: r["data_digest"] for r in both.records}
    assert digests["qa_1"] != digests["qa_2"]


def test_cost_is_one_forward_per_trial_and_32_decoding_steps():
    settings = _settings(methods=("none", "yarn"), lengths="1500,3000", trials=3)
    items = get("qa").cost(settings, 64)
    assert len(items) == 2
    assert expanded_forwards(items[0]) == (1468,) * 3 + (2968,) * 3 and items[0].decode_steps == 2 * 3 * 32 and items[0].cells == 2


# -- options and bad input ----------------------------------------------------------------------


def test_qa_data_forms():
    assert parse_spec("dev-v2.0.json") == (("", "dev-v2.0.json"),)
    assert parse_spec("qa_1=a.json,qa_2=b.json") == (("qa_1", "a.json"), ("qa_2", "b.json"))
    assert parse_spec({"qa_2": "b.json"}) == (("qa_2", "b.json"),)
    from ctxbench.tasks.qa import specs

    assert specs(_settings()) == {"qa_1": str(SQUAD)}
    assert specs(_settings(qa_data=str(HOTPOT), variants="qa_2")) == {"qa_2": str(HOTPOT)}
    assert specs(_settings(qa_data=f"qa_2={HOTPOT}")) == {"qa_2": str(HOTPOT)}
    assert specs(_settings(qa_data=f"qa_1={SQUAD},qa_2={HOTPOT}", variants="qa_2")) == {"qa_2": str(HOTPOT)}


@pytest.mark.parametrize(
    "options,words",
    [
        (dict(qa_data=None), "no --qa-data was given"),
        (dict(qa_data="/does/not/exist.json"), "'/does/not/exist.json' for qa_1 is not found"),
        (dict(qa_data=str(HOTPOT)), "is a HotpotQA distractor dev file, but qa_1 needs SQuAD"),
        (dict(qa_data=str(SQUAD), variants="qa_2"), "is a SQuAD v2.0 dev file, but qa_2 needs HotpotQA"),
        (dict(qa_data=str(SQUAD), variants="all"), "one --qa-data path for 2 variants"),
        (dict(qa_data=f"qa_1={SQUAD}", variants="qa_1,qa_2"), "names no file for qa_2"),
        (dict(qa_data="qa_3=x.json"), "unknown qa variant in --qa-data 'qa_3'"),
        (dict(qa_data="qa_1="), "is not VARIANT=PATH"),
        (dict(qa_data=f"qa_1={SQUAD},qa_1={SQUAD}"), "given twice"),
        (dict(variants="qa_3"), "unknown qa variant 'qa_3'"),
        (dict(protocol="exact"), "qa has no --protocol exact"),
        (dict(protocol="rulers"), "unknown --protocol 'rulers'"),
        (dict(trials="0"), "--trials 0"),
    ],
)
def test_bad_options_are_one_clear_error(options, words):
    with pytest.raises(UserError, match=re.escape(words)):
        if options.get("qa_data", "") is None:
            build_settings(get("qa"), [resolve("none")], 2.0, "1500", {k: v for k, v in options.items() if k != "qa_data"})
        else:
            _settings(**options)


GARBAGE = {
    "not-json.json": b"<html>404 Not Found</html>\n",
    "truncated.json": SQUAD.read_bytes()[:500],
    "empty.json": b"",
    "wrong-shape.json": b'{"version": "v2.0", "data": [{"title": "x"}]}',
    "no-questions.json": json.dumps({"version": "v2.0", "data": [{"title": "x", "paragraphs": [{"context": "c", "qas": []}]}]}).encode(),
    "bad-hotpot.json": b'[{"question": "q", "answer": "a", "context": [["a title only"]]}]',
    "latin1.json": "{\"data\": \"caf\u00e9\"}".encode("latin-1"),
}


@pytest.fixture
def qa_workdir(tmp_path, saved_model, monkeypatch):
    for name, content in GARBAGE.items():
        (tmp_path / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    return tmp_path


def _cli(monkeypatch, argv):
    from ctxbench.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    try:
        main()
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.mark.parametrize(
    "argv,words",
    [
        ([], "no --qa-data was given"),
        (["--qa-data", "missing.json"], "'missing.json' for qa_1 is not found"),
        (["--qa-data", "."], "is a directory"),
        (["--qa-data", "not-json.json"], "'not-json.json' is not JSON"),
        (["--qa-data", "truncated.json"], "'truncated.json' is not JSON"),
        (["--qa-data", "empty.json"], "'empty.json' is not JSON"),
        (["--qa-data", "latin1.json"], "'latin1.json' is not JSON"),
        (["--qa-data", "wrong-shape.json"], "is not the SQuAD v2.0 dev format (an article without a \"paragraphs\" list)"),
        (["--qa-data", "no-questions.json"], "holds no answerable questions"),
        (["--qa-data", "bad-hotpot.json", "--variant", "qa_2"], "is not the HotpotQA distractor dev format (a \"context\" entry"),
        (["--qa-data", "wrong-shape.json", "--variant", "qa_2"], "is a SQuAD v2.0 dev file, but qa_2 needs HotpotQA"),
    ],
)
def test_bad_qa_data_is_one_line_and_exit_2_before_any_model_loads(qa_workdir, saved_model, monkeypatch, capsys, argv, words):
    import ctxbench.runner.grid

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(ctxbench.runner.grid.ModelConfig, "load", no_load)
    code = _cli(monkeypatch, ["qa", "--model", str(saved_model), "--len", "1500", "--out", "out.csv", *argv])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and " — " in lines[0] and words in lines[0], lines[0]
    assert not (qa_workdir / "out.csv").exists()
    if not argv:  # where to get the official files
        assert "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json" in lines[0]
        assert "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json" in lines[0]


def test_the_cli_runs_qa_end_to_end(qa_workdir, saved_model, monkeypatch, capsys):
    code = _cli(monkeypatch, ["qa", "--model", str(saved_model), "--qa-data", str(HOTPOT), "--variant", "qa_2", "--len", "1500",
                              "--trials", "2", "--device", "cpu", "--out", "out.csv"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    from ctxbench.results.store import read_records

    records = read_records(qa_workdir / "out.csv")
    assert [r["metric"] for r in records] == ["score", "score", "accuracy", "accuracy_lo", "accuracy_hi"]
    assert {r["dataset"] for r in records} == {"ruler-qa_2:hotpot-dev-distractor-mini.json"}
    assert all(r["task"] == "qa" and r["variant"] == "qa_2" and r["length"] in ("1500", 1500) for r in records)
