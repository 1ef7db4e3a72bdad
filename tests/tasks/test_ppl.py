"""Perplexity task: every number equals a plain, obviously-correct loop."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from helpers import TRAINED, run_settings, tiny_llama

from ctxbench.api import to_frame
from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.model import scoring
from ctxbench.tasks import ppl
from ctxbench.tasks.corpus import Tokenized, load_corpus


def _settings(corpus_dir, methods=("none",), factors=(2.0,), lengths=(32, 100, 200), **kw):
    return ppl.Settings(
        methods=[resolve(m) for m in methods], factors=list(factors), lengths=list(lengths), dataset=str(corpus_dir), **kw
    )


def _aggregate(records, metric="nll"):
    frame = to_frame(records)
    part = frame[(frame.doc == "all") & (frame.metric == metric)]
    return {(r.method, int(r.length)): float(r.value) for r in part.itertuples()}


def _docs(corpus_dir, tokenizer, n, count):
    tokens = Tokenized(load_corpus(str(corpus_dir)), tokenizer)
    return [tokens[i] for i in tokens.select([n], count)[n]]


def _labels_nll(model, docs, n):
    """The plain loop: one `labels=` forward per document, token-weighted mean."""
    total = count = 0.0
    with torch.no_grad():
        for ids in docs:
            x = ids[:n].long()[None]
            loss = model(input_ids=x, labels=x).loss.item()
            total, count = total + loss * (n - 1), count + (n - 1)
    return total / count


def test_ppl_equals_plain_labels_loop_for_plain_rope(tiny_lm, corpus_dir, tokenizer):
    result = run_settings(tiny_lm, "ppl", _settings(corpus_dir, docs=2))
    got = _aggregate(result.records)
    for n in (32, 100, 200):
        ref = _labels_nll(tiny_lm.model, _docs(corpus_dir, tokenizer, n, 2), n)
        assert got[("none", n)] == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize(
    "method,native",
    [
        ("linear", {"rope_type": "linear", "factor": 2.0}),
        ("yarn", {"rope_type": "yarn", "factor": 2.0}),
        ("dynamic-ntk", {"rope_type": "dynamic", "factor": 2.0}),
    ],
)
def test_ppl_equals_labels_loop_on_natively_scaled_model(tiny_lm, corpus_dir, tokenizer, method, native):
    result = run_settings(tiny_lm, "ppl", _settings(corpus_dir, methods=(method,), docs=2))
    got = _aggregate(result.records)
    reference = tiny_llama({"rope_theta": 10000.0, **native})
    reference.load_state_dict(tiny_lm.model.state_dict())
    for n in (32, 100, 200):
        ref = _labels_nll(reference, _docs(corpus_dir, tokenizer, n, 2), n)
        assert got[(method, n)] == pytest.approx(ref, rel=1e-5), n


@pytest.mark.parametrize("method", ["none", "yarn", "ntk-by-parts", "rerope"])
def test_one_pass_lengths_equal_each_length_scored_on_its_own(tiny_lm, corpus_dir, method):
    settings = _settings(corpus_dir, methods=(method,), docs=3, lengths=(40, 110, 240))
    frame = to_frame(run_settings(tiny_lm, "ppl", settings).records)
    per_doc = frame[(frame.doc != "all") & (frame.metric == "nll")]
    tokens = Tokenized(load_corpus(str(corpus_dir)), tiny_lm.tokenizer)
    setting = resolve(method)
    assert len(per_doc) == 6  # a.txt and b.txt reach 240 tokens; each at three lengths
    for row in per_doc.itertuples():
        ids = tokens[tokens.corpus.names.index(row.doc)][: int(row.length)]
        with applied(tiny_lm.model, tiny_lm.geometry, setting, 2.0, int(row.length)):
            alone = scoring.token_nll(tiny_lm.model, ids).double().mean().item()
        assert row.value == pytest.approx(alone, rel=1e-5)


def test_one_pass_runs_one_forward_per_document(counting_lm, corpus_dir):
    run_settings(counting_lm, "ppl", _settings(corpus_dir, methods=("ntk",), docs=3, lengths=(40, 110, 240)))
    # the same documents at every length: a.txt (400) and b.txt (250), one forward each at 240.
    assert sorted(counting_lm.forwards) == [(1, 240), (1, 240)]


def test_dynamic_methods_run_one_forward_per_length_and_document(counting_lm, corpus_dir):
    run_settings(counting_lm, "ppl", _settings(corpus_dir, methods=("dynamic-ntk",), docs=2, lengths=(40, 110, 240)))
    assert sorted(n for _, n in counting_lm.forwards) == [40, 40, 110, 110, 240, 240]


def test_factor_independent_methods_run_once_per_length_whatever_the_factors(counting_lm, corpus_dir):
    settings = _settings(corpus_dir, methods=("none", "yarn"), factors=(2.0, 4.0), docs=1, lengths=(40, 110))
    records = run_settings(counting_lm, "ppl", settings).records
    # one shared forward (at 110) for none, one per factor for yarn
    assert len(counting_lm.forwards) == 3
    factors = {(r["method"], r["factor"]) for r in records if r["metric"] == "ppl" and r["doc"] == "all"}
    assert factors == {("none", ""), ("yarn", "2.0"), ("yarn", "4.0")}


def test_sliding_window_equals_perplexity_guide_loop(tiny_lm, corpus_dir, tokenizer):
    n, stride = 64, 24
    settings = _settings(corpus_dir, lengths=(n,), stride=stride, docs=2)
    got = _aggregate(run_settings(tiny_lm, "ppl", settings).records)[("none", n)]
    total = count = 0.0
    with torch.no_grad():
        for ids in _docs(corpus_dir, tokenizer, n, 2):  # HF perplexity guide, whole document
            ids = ids.long()
            prev_end = 0
            for begin in range(0, len(ids), stride):
                end = min(begin + n, len(ids))
                target = end - prev_end
                x = ids[begin:end][None]
                labels = x.clone()
                labels[:, :-target] = -100
                loss = tiny_lm.model(input_ids=x, labels=labels).loss.item()
                scored = (labels[:, 1:] != -100).sum().item()
                total, count = total + loss * scored, count + scored
                prev_end = end
                if end == len(ids):
                    break
    assert got == pytest.approx(total / count, rel=1e-5)


def test_sliding_scores_every_token_after_the_first_once(tiny_lm):
    ids = torch.randint(0, 256, (150,))
    nll = scoring.sliding_nll(tiny_lm.model, ids, window=64, stride=16)
    assert nll.shape == (149,)
    full = scoring.token_nll(tiny_lm.model, ids[:64])
    assert torch.allclose(nll[:63], full, atol=1e-6)


def test_scoring_never_builds_logits_for_the_whole_sequence(tiny_lm, monkeypatch):
    shapes = []
    real = scoring.head_logits
    monkeypatch.setattr(scoring, "head_logits", lambda model, h: shapes.append(h.shape[1]) or real(model, h))
    ids = torch.randint(0, 256, (300,))
    chunked = scoring.token_nll(tiny_lm.model, ids, chunk=64)
    assert max(shapes) == 64 and sum(shapes) == 299
    with torch.no_grad():
        full = torch.nn.functional.cross_entropy(tiny_lm.model(ids[None].long()).logits[0, :-1], ids[1:].long(), reduction="none")
    assert torch.allclose(chunked, full, atol=1e-5)


def test_rows_carry_doc_and_aggregate_values(tiny_lm, corpus_dir):
    frame = to_frame(run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(100,), docs=2)).records)
    per_doc = frame[(frame.doc != "all") & (frame.metric == "nll")]
    agg = frame[(frame.doc == "all") & (frame.metric == "nll")].value.item()
    weighted = (per_doc.value * per_doc.tokens).sum() / per_doc.tokens.sum()
    assert len(per_doc) == 2 and agg == pytest.approx(weighted, rel=1e-9)
    ppl_row = frame[(frame.doc == "all") & (frame.metric == "ppl")].value.item()
    assert ppl_row == pytest.approx(math.exp(agg))
    assert set(frame["mode"]) == {"truncate"} and set(frame["stride"].astype(int)) == {100}


def test_shorter_documents_are_skipped_and_counted(tiny_lm, corpus_dir):
    ctx = ppl.prepare(tiny_lm, _settings(corpus_dir, lengths=(200,), docs=3))
    assert ctx.state.chosen[200] == [0, 1]  # a.txt (400) and b.txt (250); c.txt (120) is too short
    assert any("only 2 of 3" in note for note in ctx.notes)


def test_default_lengths_are_half_to_four_times_trained_capped_by_documents(tiny_lm, corpus_dir):
    (corpus_dir / "a.txt").unlink()  # longest document left: 250 tokens < 4L = 256
    ctx = ppl.prepare(tiny_lm, ppl.Settings(methods=[resolve("none")], factors=[2.0], dataset=str(corpus_dir), docs=1))
    assert ppl.default_lengths(TRAINED) == [32, 64, 128, 256]
    assert ctx.state.lengths == [32, 64, 128]
    assert any("no document has 256 tokens" in note for note in ctx.notes)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(lengths=(500,)), "shorter than every length"),
        (dict(lengths=(64,), stride=0), "--stride 0"),
        (dict(lengths=(64,), stride=65), "longer than length 64"),
        (dict(lengths=(64,), docs=0), "--docs 0"),
    ],
)
def test_bad_settings_raise_one_clear_error(tiny_lm, corpus_dir, kwargs, message):
    with pytest.raises(UserError, match=message):
        settings = _settings(corpus_dir, **kwargs)
        ppl.validate(settings)
        ppl.prepare(tiny_lm, settings)


def _position_rows(records, method, length):
    rows = [r for r in records if r["metric"] == "nll_pos" and r["method"] == method and r["length"] == str(length)]
    return sorted(([int(r["pos_start"]), int(r["pos_end"])], float(r["value"]), int(r["tokens"])) for r in rows)


def test_loss_by_position_rows_average_back_to_the_aggregate_nll(tiny_lm, corpus_dir, monkeypatch):
    monkeypatch.setattr(ppl, "BUCKET", 16)
    records = run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(100, 200), docs=2)).records
    for n in (100, 200):
        buckets = _position_rows(records, "none", n)
        assert buckets[0][0] == [1, 16] and buckets[-1][0][1] == n
        weighted = sum(v * t for _, v, t in buckets) / sum(t for _, _, t in buckets)
        agg = next(float(r["value"]) for r in records if r["metric"] == "nll" and r["doc"] == "all" and r["length"] == str(n))
        assert weighted == pytest.approx(agg, rel=1e-9)


def test_shared_pass_and_per_length_pass_give_the_same_buckets(tiny_lm, corpus_dir, monkeypatch):
    monkeypatch.setattr(ppl, "BUCKET", 16)
    shared = run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(100, 200), docs=2)).records
    alone = run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(100,), docs=2)).records
    got, ref = _position_rows(shared, "none", 100), _position_rows(alone, "none", 100)
    assert [p for p, _, _ in got] == [p for p, _, _ in ref]
    assert [v for _, v, _ in got] == pytest.approx([v for _, v, _ in ref], rel=1e-5)


def test_beyond_trained_length_row_is_the_mean_of_positions_at_or_past_L(tiny_lm, corpus_dir):
    records = run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(200,), docs=1)).records
    beyond = next(float(r["value"]) for r in records if r["metric"] == "nll_beyond_L")
    tokens = Tokenized(load_corpus(str(corpus_dir)), tiny_lm.tokenizer)
    nll = scoring.token_nll(tiny_lm.model, tokens[0][:200])
    assert beyond == pytest.approx(nll[TRAINED - 1 :].double().mean().item(), rel=1e-6)


def test_aggregate_carries_a_bootstrap_interval_around_it(tiny_lm, corpus_dir):
    records = run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(100,), docs=2)).records
    value = {r["metric"]: float(r["value"]) for r in records if r["doc"] == "all" and r["metric"].startswith("ppl")}
    assert value["ppl_lo"] <= value["ppl"] <= value["ppl_hi"]
    how = {json.loads(r["extra"])["interval"] for r in records if r["metric"] == "ppl_lo"}
    assert how == {"95% bootstrap over docs"}


# --- BOS: --bos auto | on | off ------------------------------------------------------------------


def _bos_adding(tokenizer):
    """The byte tokenizer, changed to put <s> before every text as Llama's tokenizers do."""
    from tokenizers import processors

    tok = copy.deepcopy(tokenizer)
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    return tok


@pytest.mark.parametrize("adds_bos", [False, True], ids=["tokenizer-without-bos", "tokenizer-adding-bos"])
def test_bos_on_off_and_auto_give_the_expected_first_tokens(corpus_dir, tokenizer, adds_bos):
    tok = _bos_adding(tokenizer) if adds_bos else tokenizer
    corpus = load_corpus(str(corpus_dir))
    own = tok(corpus.texts[0])["input_ids"]
    assert (own[0] == tok.bos_token_id) == adds_bos
    text = [i for i in own if i != tok.bos_token_id]
    assert Tokenized(corpus, tok, bos="auto")[0].tolist() == own  # the tokenizer's own default, untouched
    assert Tokenized(corpus, tok, bos="on")[0].tolist() == [tok.bos_token_id, *text]
    assert Tokenized(corpus, tok, bos="off")[0].tolist() == text


def test_bos_on_and_off_are_different_cells_with_different_numbers(tiny_lm, corpus_dir, tmp_path):
    from ctxbench.results.store import read_records

    out = tmp_path / "bos.csv"
    for bos in ("off", "on", "off"):  # the second "off" resumes: nothing new
        run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(64,), docs=1, bos=bos), out=out)
    rows = [r for r in read_records(out) if r["metric"] == "nll" and r["doc"] == "all"]
    assert len(rows) == 2
    by_bos = {json.loads(r["extra"])["bos"]: r for r in rows}  # recorded on the row
    off, on = by_bos["off"], by_bos["on"]
    assert off["data_digest"] != on["data_digest"]  # part of the cell's identity: resume and compare keep them apart
    assert float(off["value"]) != float(on["value"])


def test_bos_auto_scores_the_tokenizers_own_ids(tiny_lm, corpus_dir, tokenizer):
    auto = _aggregate(run_settings(tiny_lm, "ppl", _settings(corpus_dir, lengths=(64,), docs=1)).records)
    ref = _labels_nll(tiny_lm.model, _docs(corpus_dir, tokenizer, 64, 1), 64)  # tokenizer(text) as is
    assert auto[("none", 64)] == pytest.approx(ref, rel=1e-6)
