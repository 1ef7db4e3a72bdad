"""RULER's protocol (issue 24): the prompt plus the task's generation budget fit within the length
with as many whole haystack units as fit, needles and chain lines go where RULER's generators
put them (random), and the protocol is part of a cell's identity (old files read as exact)."""

from __future__ import annotations

import json
import statistics

import pytest
from helpers import run_settings
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.results.identity import cell_key
from ctxbench.results.store import read_records
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic import TOKENS_TO_GENERATE, build, load_haystack
from ctxbench.synthetic.niah import RULER_DEPTHS
from ctxbench.tasks import get

AWKWARD = (1500, 3000, 6000)
CASES = [("niah", v) for v in ("single_1", "single_2", "single_3", "multikey_1", "multikey_2", "multikey_3", "multivalue", "multiquery")]
CASES += [("vt", None), ("cwe", None), ("fwe", None)]


@pytest.fixture(scope="module")
def bpe():
    """A BPE tokenizer trained in-process on the essay haystack (a few thousand merges), so token
    counts behave like a real model's: words of one to a few tokens, digits split."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    text = load_haystack(None).text
    tok.train_from_iterator([text[i : i + 2000] for i in range(0, min(len(text), 400_000), 2000)], trainer)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>")


@pytest.mark.parametrize("length", AWKWARD)
@pytest.mark.parametrize("task,variant", CASES, ids=[f"{t}-{v}" if v else t for t, v in CASES])
def test_prompt_plus_budget_fits_the_length_and_one_more_unit_would_not(bpe, task, variant, length):
    for trial in range(2):
        p = build(task, variant, bpe, length, None, 0, trial, protocol="ruler")
        budget = TOKENS_TO_GENERATE[task]
        assert p.max_new_tokens == budget
        slack = length - budget - len(p.ids)
        assert slack >= 0, (len(p.ids), budget, length)
        assert slack < p.extra["next_unit"], (slack, p.extra["next_unit"])  # the largest haystack that fits


def test_the_exact_protocol_still_makes_the_prompt_exactly_the_length(bpe):
    for task, variant in CASES:
        assert len(build(task, variant, bpe, 3000, 0.5, 0, 0, protocol="exact").ids) == 3000


def test_chat_template_tokens_count_toward_the_length(bpe):
    bpe.chat_template = "{% for m in messages %}<|user|>{{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    try:
        raw = build("niah", "single_1", bpe, 3000, None, 0, 0, protocol="ruler")
        chat = build("niah", "single_1", bpe, 3000, None, 0, 0, chat=True, protocol="ruler")
    finally:
        bpe.chat_template = None
    assert len(chat.ids) + 128 <= 3000 and len(raw.ids) + 128 <= 3000
    assert chat.extra["haystack_units"] <= raw.extra["haystack_units"]


def _depths(task, variant, bpe, protocol, depth, trials=60):
    return [build(task, variant, bpe, 3000, depth, 0, t, protocol=protocol).extra["needle_depths"] for t in range(trials)]


def test_rulers_needles_are_spread_at_random_over_the_whole_haystack(bpe):
    """multivalue: RULER places all four needles at random depths; the exact protocol's depth 0.5
    puts every one in the second half (the departure issue 24 names)."""
    ruler = [d for ds in _depths("niah", "multivalue", bpe, "ruler", None) for d in ds]
    exact = [d for ds in _depths("niah", "multivalue", bpe, "exact", 0.5) for d in ds]
    assert all(d >= 0.49 for d in exact)
    assert 0.35 < sum(d < 0.5 for d in ruler) / len(ruler) < 0.65
    assert 0.4 < statistics.mean(ruler) < 0.6


def test_essay_needles_sit_at_rulers_forty_depths_of_the_sentences(bpe):
    """niah.py: needle i at sentence index int(sentences * depth / 100) for distinct depths of its
    40, sorted, in needle order."""
    for t in range(10):
        p = build("niah", "multikey_1", bpe, 3000, None, 0, t, protocol="ruler")
        units, at = p.extra["haystack_units"], p.extra["needle_units"]
        assert units > 10 and len(at) == 4 and at == sorted(at)
        assert set(at) <= {int(units * d) for d in RULER_DEPTHS}


def test_line_haystack_needles_sit_at_distinct_random_lines(bpe):
    """niah.py: ``sorted(random.sample(range(num_haystack), n), reverse=True)``, needle 0 at the
    latest index: distinct lines, before one of them (never after the last)."""
    seen = set()
    for t in range(30):
        p = build("niah", "multikey_2", bpe, 3000, None, 0, t, protocol="ruler")
        units, (at,) = p.extra["haystack_units"], p.extra["needle_units"]
        assert 0 <= at < units
        seen.add(at)
    assert len(seen) > 10  # spread, not one fixed place


def test_vt_chain_lines_are_in_order_at_random_lines(bpe):
    firsts = []
    for t in range(60):
        p = build("vt", None, bpe, 3000, None, 0, t, protocol="ruler")
        depths, at = p.extra["needle_depths"], p.extra["needle_units"]
        assert at == sorted(at) and len(set(at)) == len(at) and at[-1] < p.extra["haystack_units"]
        firsts.append(depths[0])
    # the first of 5 uniform places: mean 1/6 of the haystack (exact at depth 0.5 puts it at 0.5)
    assert 0.08 < statistics.mean(firsts) < 0.26


def _settings(task, **options):
    return build_settings(get(task), [resolve("none")], 2.0, options.pop("lengths", "1000"), options)


def test_ruler_is_the_default_protocol_and_its_cells_have_no_depth():
    settings = _settings("niah", variants="single_1")
    assert settings.protocol == "ruler"
    with pytest.raises(UserError, match="--protocol exact"):
        _settings("niah", variants="single_1", depths="0.5")
    assert _settings("niah", variants="single_1", depths="0.5", protocol="exact").depths == (0.5,)


def test_the_protocol_is_part_of_the_cell_identity(copying_lm, tmp_path):
    out = tmp_path / "r.csv"
    ruler = run_settings(copying_lm, "niah", _settings("niah", variants="single_1", trials=2), out=out)
    exact = run_settings(copying_lm, "niah", _settings("niah", variants="single_1", trials=2, depths="0.5", protocol="exact"), out=out)
    assert ruler.ran == 1 and exact.ran == 1 and exact.skipped == 0
    records = read_records(out)
    assert {json.loads(r["options"])["protocol"] for r in records} == {"ruler", "exact"}
    assert {r["depth"] for r in records if json.loads(r["options"])["protocol"] == "ruler"} == {""}
    again = run_settings(copying_lm, "niah", _settings("niah", variants="single_1", trials=2), out=out)
    assert again.ran == 0


def test_ruler_rows_record_prompt_tokens_within_the_length(copying_lm, tmp_path):
    records = run_settings(copying_lm, "niah", _settings("niah", variants="single_1", trials=3, lengths="1200")).records
    scores = [r for r in records if r["metric"] == "score"]
    assert len(scores) == 3 and all(int(r["tokens"]) + 128 <= 1200 for r in scores)


def test_rows_written_before_the_protocol_existed_read_as_exact(tmp_path):
    """The committed niah results predate protocols (exact-length prompts): they key as exact,
    and so does a file written with an options column that lacks the protocol."""
    import csv

    from ctxbench.results.store import COLUMNS

    records = read_records("results/niah-smollm2-x2.csv")
    assert {json.loads(r["options"])["protocol"] for r in records} == {"exact"}
    row = {c: records[0].get(c, "") for c in COLUMNS} | {"options": '{"chat": false}'}
    path = tmp_path / "no-protocol.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerow(row)
    (again,) = read_records(path)
    assert json.loads(again["options"]) == {"chat": False, "protocol": "exact"}
    assert cell_key(again) == cell_key(records[0])
