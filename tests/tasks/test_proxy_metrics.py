"""Proxy metrics (--metrics): each number equals a plain, obviously-correct loop on a tiny model
(full-vocabulary logits, torch.nn.functional.cross_entropy / kl_div per token, key tokens chosen
by hand), references are computed once, and a default run is what it always was."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import TRAINED, byte_tokenizer, expanded_forwards, run_settings, tiny_llama

from ctxbench.backends.hf import wrap
from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.results.store import read_records
from ctxbench.tasks import get, passkey, ppl, proxy
from ctxbench.tasks.corpus import Tokenized, load_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

LENGTHS = (32, 100, 200)


@pytest.fixture(scope="module")
def peaked_lm():
    """The tiny model with larger weights: peaked next-token distributions, so a method's change
    of the rotary frequencies moves them measurably (the default init gives near-uniform ones)."""
    return wrap(tiny_llama(initializer_range=0.2), byte_tokenizer(), name="tiny-peaked", digest="tiny-peaked-seed0")


def _ppl_settings(corpus_dir, methods=("none", "yarn", "dynamic-ntk"), **kw):
    base = dict(methods=tuple(resolve(m) for m in methods), factors=(2.0,), lengths=LENGTHS, dataset=str(corpus_dir), docs=2)
    return ppl.Settings(**{**base, **kw})


def _docs(corpus_dir, n):
    tokens = Tokenized(load_corpus(str(corpus_dir)), byte_tokenizer())
    return [(tokens.corpus.names[i], tokens[i]) for i in tokens.select([n], 2)[n]]


def _agg(records, metric):
    return {(r["label"], int(r["length"])): float(r["value"]) for r in records if r["metric"] == metric and r["doc"] == "all"}


def _logits(model, ids):
    """Full-vocabulary fp32 logits of one sequence: (n, vocab)."""
    with torch.no_grad():
        return model(input_ids=ids.long()[None]).logits[0].float()


# ---------------------------------------------------------------------------------------- LongPPL


def _window_start(p: int, window: int, stride: int) -> int:
    """Where the context of target ``p`` starts: at the earliest window (windows of ``window`` tokens
    starting at 0, stride, 2 stride, ...) that holds ``p``."""
    start = 0
    while start + window <= p:
        start += stride
    return start


def _hand_losses(model, ids, window, stride):
    """Loss of every target p = 1 .. n-1 from its own context ids[start:p], one forward per target."""
    out = []
    for p in range(1, len(ids)):
        start = _window_start(p, window, stride)
        out.append(F.cross_entropy(_logits(model, ids[start:p])[-1:], ids[p : p + 1].long()).item())
    return torch.tensor(out)


def test_key_token_selection_is_longppls_strict_thresholds():
    short = torch.tensor([5.0, 4.0, 3.5, 4.5, 9.0, 4.0])
    long = torch.tensor([1.0, 2.0, 1.5, 1.9, 1.0, 1.0])  # targets at positions 1..6
    mask = proxy.key_token_mask(short, long, first=2)
    # position 1: before the short context is full; 2: long loss exactly 2 (log-prob -2 is not > -2);
    # 3: LSD exactly 2 (not > 2); 4, 5, 6: key
    assert mask.tolist() == [False, False, False, True, True, True]


def test_short_window_is_a_quarter_of_the_trained_length():
    assert (proxy.short_window(8192), proxy.short_stride(8192), proxy.long_stride(8192)) == (2048, 512, 2048)
    assert (proxy.short_window(TRAINED), proxy.short_stride(TRAINED), proxy.long_stride(TRAINED)) == (16, 4, 16)


def test_longppl_equals_a_hand_written_key_token_loop(peaked_lm, corpus_dir, monkeypatch):
    model = peaked_lm.model
    w, s = TRAINED // 4, TRAINED // 16
    docs = _docs(corpus_dir, max(LENGTHS))
    longest = {name: ids[: max(LENGTHS)] for name, ids in docs}
    with applied(model, peaked_lm.geometry, resolve("none"), 1.0, max(LENGTHS)):
        ref = {name: (_hand_losses(model, ids, w + s, s), _hand_losses(model, ids, TRAINED, TRAINED // 4)) for name, ids in longest.items()}
    # thresholds that split this random model's tokens (its losses are far above LongPPL's 2 nats),
    # each in the middle of a gap of the values it cuts, so float noise between two ways of computing
    # one loss (1e-6) cannot move a token across it
    alpha = 0.05
    longs = sorted(torch.cat([lg for _, lg in ref.values()]).tolist())
    mid = len(longs) // 2
    beta = -(longs[mid] + longs[mid + 1]) / 2
    diffs = torch.cat([sh - lg for sh, lg in ref.values()])
    assert min(abs(v + beta) for v in longs) > 1e-4 and float((diffs - alpha).abs().min()) > 1e-4
    monkeypatch.setattr(proxy, "ALPHA", alpha)
    monkeypatch.setattr(proxy, "BETA", beta)
    keys = {}
    for name, (short, long) in ref.items():
        keys[name] = [p for p in range(1, len(short) + 1) if p >= w and short[p - 1] - long[p - 1] > alpha and long[p - 1] < -beta]
    assert all(keys.values()), "every document has key tokens"
    # both conditions bind: some tokens pass one and fail the other
    pairs = [(sh[p - 1] - lg[p - 1] > alpha, lg[p - 1] < -beta) for sh, lg in ref.values() for p in range(w, len(sh) + 1)]
    assert (True, False) in pairs and (False, True) in pairs
    records = run_settings(peaked_lm, "ppl", _ppl_settings(corpus_dir, metrics=("longppl",))).records
    got, counts = _agg(records, "longppl"), _agg(records, "key_tokens")
    for label in ("none", "yarn", "dynamic-ntk"):
        method = resolve(label)
        for n in LENGTHS:
            key_nll = []
            for name, ids in docs:
                with applied(model, peaked_lm.geometry, method, 2.0, n):
                    nll = F.cross_entropy(_logits(model, ids[:n])[:-1], ids[1:n].long(), reduction="none")
                key_nll += [nll[p - 1].item() for p in keys[name] if p < n]
            assert counts[(label, n)] == len(key_nll)
            if key_nll:
                assert got[(label, n)] == pytest.approx(math.exp(sum(key_nll) / len(key_nll)), rel=1e-5), (label, n)
            else:
                assert math.isnan(got[(label, n)])


def test_longppl_rows_carry_an_interval_and_the_evaluator_settings(peaked_lm, corpus_dir, monkeypatch):
    monkeypatch.setattr(proxy, "ALPHA", 0.0)
    monkeypatch.setattr(proxy, "BETA", -6.5)
    records = run_settings(peaked_lm, "ppl", _ppl_settings(corpus_dir, methods=("yarn",), lengths=(200,), metrics=("longppl",))).records
    value, lo, hi = (next(float(r["value"]) for r in records if r["metric"] == m and r["doc"] == "all") for m in ("longppl", "longppl_lo", "longppl_hi"))
    assert lo <= value <= hi and lo < hi
    extra = json.loads(next(r["extra"] for r in records if r["metric"] == "longppl" and r["doc"] == "all"))
    assert (extra["short_window"], extra["short_stride"], extra["long_window"], extra["long_stride"]) == (16, 4, 64, 16)
    assert extra["evaluator"] == "none"


def test_key_tokens_are_found_once_per_document_for_the_whole_grid(counting_lm, corpus_dir):
    plain = _ppl_settings(corpus_dir, methods=("none", "yarn", "ntk"))
    run_settings(counting_lm, "ppl", plain)
    before = len(counting_lm.forwards)
    counting_lm.forwards.clear()
    run_settings(counting_lm, "ppl", _ppl_settings(corpus_dir, methods=("none", "yarn", "ntk"), metrics=("longppl",)))
    evaluator = [len(proxy.evaluator_forwards(max(LENGTHS), TRAINED, ("longppl",))) for _ in range(2)]  # 2 documents
    assert len(counting_lm.forwards) == before + sum(evaluator)


# ------------------------------------------------------------------------------------------- KL


def test_kl_equals_a_plain_kl_div_loop_over_positions_inside_the_trained_length(peaked_lm, corpus_dir):
    model = peaked_lm.model
    records = run_settings(peaked_lm, "ppl", _ppl_settings(corpus_dir, metrics=("kl",))).records
    got = _agg(records, "kl")
    docs = _docs(corpus_dir, max(LENGTHS))
    for label in ("none", "yarn", "dynamic-ntk"):
        for n in LENGTHS:
            per_position, same = [], []
            for _, ids in docs:
                m = min(n, TRAINED) - 1  # positions 0 .. m-1 predict targets 1 .. min(n, L) - 1
                with applied(model, peaked_lm.geometry, resolve("none"), 1.0, n):
                    base = torch.log_softmax(_logits(model, ids[:n])[:m], dim=-1)
                with applied(model, peaked_lm.geometry, resolve(label), 2.0, n):
                    new = torch.log_softmax(_logits(model, ids[:n])[:m], dim=-1)
                per_position += F.kl_div(new, base, log_target=True, reduction="none").sum(-1).tolist()
                same += (base.argmax(-1) == new.argmax(-1)).tolist()
            expected = sum(per_position) / len(per_position)
            assert got[(label, n)] == pytest.approx(expected, rel=1e-4, abs=1e-7), (label, n)
            row = next(r for r in records if r["metric"] == "kl" and r["doc"] == "all" and r["label"] == label and int(r["length"]) == n)
            assert int(row["tokens"]) == len(per_position)
            extra = json.loads(row["extra"])
            assert extra["same_top"] == pytest.approx(sum(same) / len(same))
            mean, mean2 = expected, sum(v * v for v in per_position) / len(per_position)
            assert extra["stderr"] == pytest.approx(math.sqrt(max(mean2 - mean**2, 0) / (len(per_position) - 1)), rel=1e-3, abs=1e-9)
    assert got[("yarn", 100)] > 1e-3  # the model's distributions really moved
    assert got[("none", 200)] == pytest.approx(0.0, abs=1e-6)
    assert got[("dynamic-ntk", 32)] == pytest.approx(0.0, abs=1e-6) and got[("dynamic-ntk", 200)] > 1e-4  # dynamic: only past L


def test_kl_keeps_the_unscaled_hidden_states_once_per_document(counting_lm, corpus_dir):
    run_settings(counting_lm, "ppl", _ppl_settings(corpus_dir, methods=("none", "yarn", "ntk")))
    before = len(counting_lm.forwards)
    counting_lm.forwards.clear()
    run_settings(counting_lm, "ppl", _ppl_settings(corpus_dir, methods=("none", "yarn", "ntk"), metrics=("kl",)))
    assert len(counting_lm.forwards) == before + 2  # one forward of min(n, L) tokens per document
    assert counting_lm.forwards[:2] == [(1, TRAINED), (1, TRAINED)]


def test_kl_never_builds_logits_for_more_than_a_chunk_of_positions(tiny_lm, corpus_dir, monkeypatch):
    from ctxbench.model import scoring

    widths = []
    real = scoring.head_logits

    def spy(model, hidden):
        widths.append(hidden.shape[1])
        return real(model, hidden)

    monkeypatch.setattr(scoring, "head_logits", spy)
    run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir, methods=("yarn",), metrics=("kl", "longppl"), chunk=16))
    assert widths and max(widths) <= 16


def test_proxy_metrics_leave_the_perplexity_rows_as_they_are(tiny_lm, corpus_dir):
    plain = run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir)).records
    extended = run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir, metrics=("kl", "longppl"))).records

    def values(records):
        return {(r["label"], r["length"], r["doc"], r["metric"], r["pos_start"]): r["value"] for r in records
                if r["metric"] in ("nll", "ppl", "ppl_lo", "ppl_hi", "nll_pos", "nll_beyond_L")}  # fmt: skip

    assert values(plain) == values(extended)


def test_metrics_refuse_sliding_windows(corpus_dir):
    with pytest.raises(UserError, match="--stride"):
        ppl.validate(_ppl_settings(corpus_dir, lengths=(100,), stride=50, metrics=("kl",)))


# ----------------------------------------------------------------------------------- answer NLL


def _answer_reference(lm, label, prompt, answer, seq_len):
    """Mean NLL of ``answer`` after ``prompt``: one full forward over both, full-vocabulary logits."""
    with applied(lm.model, lm.geometry, resolve(label), 2.0, seq_len):
        ids = torch.tensor(list(prompt) + list(answer))
        logits = _logits(lm.model, ids)[len(prompt) - 1 : -1]  # (k, vocab): the positions predicting the answer
        return F.cross_entropy(logits, torch.tensor(list(answer)), reduction="none").mean().item()


@pytest.mark.parametrize("label", ["none", "yarn", "dynamic-ntk", "rerope"])
def test_passkey_answer_nll_equals_one_full_forward_per_trial(peaked_lm, label):
    settings = passkey.Settings(methods=(resolve(label),), factors=(2.0,), lengths=(300,), depths=(0.0, 0.5), trials=3, metrics=("answer_nll",))
    records = run_settings(peaked_lm, "passkey", settings, seed=3).records
    tok = peaked_lm.tokenizer
    for depth in (0.0, 0.5):
        mine = [r for r in records if float(r["depth"]) == depth]
        expected = []
        for t in range(3):
            p = passkey.build_prompt(tok, 300, depth, passkey.draw_key(3, 300, depth, t, 5))
            answer = tok(f" {p.key}", add_special_tokens=False)["input_ids"]
            expected.append(_answer_reference(peaked_lm, label, p.ids, answer, 300 + settings.max_new_tokens))
            row = next(r for r in mine if r["metric"] == "correct" and r["trial"] == str(t))
            assert json.loads(row["extra"])["answer_nll"] == pytest.approx(expected[-1], rel=1e-4)
            assert json.loads(row["extra"])["answer_tokens"] == len(answer)
        agg = {r["metric"]: float(r["value"]) for r in mine if r["trial"] == "all"}
        assert agg["answer_nll"] == pytest.approx(sum(expected) / 3, rel=1e-4)
        assert agg["answer_nll_lo"] <= agg["answer_nll"] <= agg["answer_nll_hi"]
        assert agg["accuracy"] in (0.0, 1 / 3, 2 / 3, 1.0)  # decoding still runs and is scored


def test_niah_answer_nll_equals_one_full_forward_per_trial(peaked_lm):
    from ctxbench.runner.settings import build_settings
    from ctxbench.synthetic import build

    settings = build_settings(get("niah"), [resolve("yarn")], 2.0, "800", {"variants": "single_1,multivalue", "trials": 2, "metrics": "answer_nll"})
    records = run_settings(peaked_lm, "niah", settings).records
    tok = peaked_lm.tokenizer
    for variant in ("single_1", "multivalue"):
        prompts = [build("niah", variant, tok, 800, None, 0, t, False, None, "ruler") for t in range(2)]
        seq_len = max(800, max(len(p.ids) for p in prompts) + 128)
        for t, p in enumerate(prompts):
            answer = tok(" " + ", ".join(p.answers), add_special_tokens=False)["input_ids"]
            row = next(r for r in records if r["variant"] == variant and r["metric"] == "score" and r["trial"] == str(t))
            assert json.loads(row["extra"])["answer_nll"] == pytest.approx(_answer_reference(peaked_lm, "yarn", p.ids, answer, seq_len), rel=1e-4)


def test_answer_nll_of_one_trial_has_no_interval(tiny_lm):
    settings = passkey.Settings(methods=(resolve("none"),), factors=(2.0,), lengths=(300,), depths=(0.5,), trials=1, metrics=("answer_nll",))
    agg = {r["metric"]: r["value"] for r in run_settings(tiny_lm, "passkey", settings).records if r["trial"] == "all"}
    assert agg["answer_nll_lo"] == "nan" and agg["answer_nll_hi"] == "nan"


def test_raising_trials_keeps_the_answer_nll_of_the_trials_already_run(tiny_lm, tmp_path):
    out = tmp_path / "pk.csv"
    few = passkey.Settings(methods=(resolve("none"),), factors=(2.0,), lengths=(300,), depths=(0.5,), trials=2, metrics=("answer_nll",))
    run_settings(tiny_lm, "passkey", few, out=out)
    first = {r["trial"]: json.loads(r["extra"])["answer_nll"] for r in read_records(out) if r["metric"] == "correct"}
    run_settings(tiny_lm, "passkey", passkey.Settings(**{**few.__dict__, "trials": 4}), out=out)
    rows = read_records(out)
    now = {r["trial"]: json.loads(r["extra"])["answer_nll"] for r in rows if r["metric"] == "correct"}
    assert set(now) == {"0", "1", "2", "3"} and {t: now[t] for t in first} == first
    agg = next(float(r["value"]) for r in rows if r["metric"] == "answer_nll" and r["trial"] == "all")
    assert agg == pytest.approx(sum(now.values()) / 4)


# ------------------------------------------------------------------------------ identity, input


def test_a_default_run_keeps_its_options_and_cell_keys(tiny_lm, corpus_dir, tmp_path):
    from ctxbench.results.identity import cell_key

    out = tmp_path / "pk.csv"
    default = passkey.Settings(methods=(resolve("none"),), factors=(2.0,), lengths=(300,), depths=(0.5,), trials=1)
    first = run_settings(tiny_lm, "passkey", default, out=out)
    assert {r["options"] for r in first.records} == {'{"chat": false, "digits": 5}'}  # as every release wrote it
    assert {r["options"] for r in read_records(out)} == {'{"chat": false, "digits": 5}'}  # read back without a metrics key
    again = run_settings(tiny_lm, "passkey", passkey.Settings(**{**default.__dict__, "metrics": ()}), out=out)
    assert again.ran == 0 and again.skipped == 1  # an explicit empty list is the default: the same cell
    extended = run_settings(tiny_lm, "passkey", passkey.Settings(**{**default.__dict__, "metrics": ("answer_nll",)}), out=out)
    assert extended.ran == 1  # a cell of its own
    keys = {cell_key(r) for r in read_records(out)}
    assert len(keys) == 2
    assert {r["options"] for r in extended.records} == {'{"chat": false, "digits": 5, "metrics": ["answer_nll"]}'}
    ppl_rows = run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir, methods=("none",), lengths=(32,))).records
    assert {r["options"] for r in ppl_rows} == {"{}"}


def test_metrics_parse_in_a_canonical_order_and_refuse_unknown_names():
    assert proxy.parse_metrics("kl,longppl", proxy.PPL_METRICS) == ("longppl", "kl")
    assert proxy.parse_metrics(["kl"], proxy.PPL_METRICS) == ("kl",)
    assert proxy.parse_metrics([], proxy.PPL_METRICS) == ()
    with pytest.raises(UserError, match="did you mean 'longppl'"):
        proxy.parse_metrics("longpl", proxy.PPL_METRICS)
    with pytest.raises(UserError, match="twice"):
        proxy.parse_metrics("kl,kl", proxy.PPL_METRICS)


def test_a_suite_section_takes_metrics(tmp_path):
    from ctxbench.runner.suite import load_suite

    path = tmp_path / "s.toml"
    path.write_text('model = "smollm2-135m"\n[ppl]\nlengths = ["1k"]\nmetrics = ["kl", "longppl"]\n[passkey]\nlengths = ["1k"]\nmetrics = "answer_nll"\n')
    jobs = {job.task.name: job.settings for job in load_suite(path).jobs}
    assert jobs["ppl"].metrics == ("longppl", "kl") and jobs["passkey"].metrics == ("answer_nll",)


def test_plans_count_the_reference_forwards():
    ppl_plain = ppl.cost(ppl.Settings(methods=(resolve("yarn"),), factors=(2.0,), lengths=(4096, 8192), docs=2), 4096)
    ppl_more = ppl.cost(ppl.Settings(methods=(resolve("yarn"),), factors=(2.0,), lengths=(4096, 8192), docs=2, metrics=("longppl", "kl")), 4096)
    assert ppl_more[:-1] == ppl_plain
    assert sorted(expanded_forwards(ppl_more[-1])) == sorted(proxy.evaluator_forwards(8192, 4096, ("longppl", "kl")) * 2)
    pk = passkey.Settings(methods=(resolve("yarn"),), factors=(2.0,), lengths=(1024,), depths=(0.5,), trials=2, metrics=("answer_nll",))
    items = passkey.cost(pk, 4096)
    assert len(items) == 1  # scored on the trials' prefills: no forwards of its own
    pk = passkey.Settings(methods=(resolve("ms-poe"),), factors=(2.0,), lengths=(1024,), depths=(0.5,), trials=2, metrics=("answer_nll",))
    items = passkey.cost(pk, 4096)  # a method that is not causal scores in a forward of its own per trial
    assert len(items) == 2 and items[1].decode_steps == 0 and expanded_forwards(items[1]) == expanded_forwards(items[0])


# ------------------------------------------------------------------------------ reports


def _report_pivots(records, **kw):
    from ctxbench.report.formats import pivots

    return pivots(records, **kw)


def test_report_shows_each_proxy_as_its_own_table_with_the_rows_values_and_intervals(peaked_lm, corpus_dir):
    records = run_settings(peaked_lm, "ppl", _ppl_settings(corpus_dir, metrics=("kl", "longppl"))).records
    ps = _report_pivots(records)
    by_metric = {p.metric: p for p in ps}
    assert set(by_metric) == {"ppl", "kl", "longppl"} and ps[0].metric == "ppl"  # the headline first
    for metric in ("kl", "longppl"):
        p = by_metric[metric]
        assert not p.headline and not p.higher_is_better
        for (label, n), value in _agg(records, metric).items():
            cell = p.rows[label][n]
            assert cell.value == pytest.approx(value) or (math.isnan(value) and math.isnan(cell.value))
            bounds = [_agg(records, metric + b)[(label, n)] for b in ("_lo", "_hi")]
            assert [cell.lo, cell.hi] == [None if math.isnan(b) else pytest.approx(b) for b in bounds]  # NaN: no interval


def test_a_proxys_table_has_no_effective_length_and_no_paired_test(peaked_lm, corpus_dir):
    records = run_settings(peaked_lm, "ppl", _ppl_settings(corpus_dir, metrics=("kl",))).records
    ps = {p.metric: p for p in _report_pivots(records, baseline="none")}
    assert ps["ppl"].effective and any(c.delta is not None for cells in ps["ppl"].rows.values() for c in cells.values())
    assert not ps["kl"].effective
    assert all(c.delta is None for cells in ps["kl"].rows.values() for c in cells.values())


def test_answer_nll_over_several_depths_is_the_mean_of_every_trial_with_a_bootstrap_interval(tiny_lm):
    settings = passkey.Settings(methods=(resolve("none"),), factors=(2.0,), lengths=(300,), depths=(0.0, 0.5), trials=3, metrics=("answer_nll",))
    records = run_settings(tiny_lm, "passkey", settings).records
    per_trial = [json.loads(r["extra"])["answer_nll"] for r in records if r["metric"] == "correct"]
    (p,) = [p for p in _report_pivots(records) if p.metric == "answer_nll"]
    cell = p.rows["none"][300]
    assert len(per_trial) == 6 and cell.n == 6
    assert cell.value == pytest.approx(sum(per_trial) / 6)
    assert min(per_trial) <= cell.lo <= cell.value <= cell.hi <= max(per_trial)


def test_every_report_format_carries_the_proxy_tables(peaked_lm, corpus_dir):
    from ctxbench.report.formats import to_csv, to_json, to_markdown

    ps = _report_pivots(run_settings(peaked_lm, "ppl", _ppl_settings(corpus_dir, metrics=("longppl",))).records)
    assert "#### ppl longppl — tiny-peaked, factor 2" in to_markdown(ps)
    assert {p["metric"] for p in json.loads(to_json(ps))} == {"ppl", "longppl"}
    assert ",longppl," in to_csv(ps)


# --------------------------------------------------------------- answer NLL on the trials' own prefill


def _prompts(tok):
    """Trial prompts sharing a filler prefix: three depths, two keys at each (equal token counts at
    one depth, so they decode as one batch), and answers of 1 to 3 tokens."""
    prompts = [passkey.build_prompt(tok, 300, d, key).ids for d in (0.0, 0.5, 1.0) for key in (11111, 22222)]
    answers = [list(p[-3:]) if i % 3 else [int(p[-1])] for i, p in enumerate(prompts)]
    return prompts, answers


@pytest.mark.parametrize("label", ["none", "rerope", "dynamic-ntk"])
def test_scoring_the_answer_on_the_prefill_leaves_the_answers_and_equals_a_forward_of_its_own(peaked_lm, label):
    from ctxbench.model.decoding import decode_shared, score_shared

    prompts, answers = _prompts(peaked_lm.tokenizer)
    with applied(peaked_lm.model, peaked_lm.geometry, resolve(label), 2.0, 320):
        plain = {a.index: a.tokens for a in decode_shared(peaked_lm.model, prompts, 8, None)}
        both = {a.index: a for a in decode_shared(peaked_lm.model, prompts, 8, None, continuations=answers)}
        alone = {s.index: s.nll for s in score_shared(peaked_lm.model, prompts, answers)}
    assert len(set(plain.values())) > 1  # the answers depend on the prompt, so a stale cache would show
    assert {i: a.tokens for i, a in both.items()} == plain
    for i, answer in enumerate(answers):
        assert both[i].nll.shape == (len(answer),)
        assert torch.allclose(both[i].nll, alone[i], atol=1e-5), i


def test_scoring_the_answer_on_the_prefill_feeds_only_the_answers_tokens(counting_lm):
    from ctxbench.model.decoding import decode_shared

    prompts, answers = _prompts(counting_lm.tokenizer)
    list(decode_shared(counting_lm.model, prompts, 4, None))
    plain = sum(b * n for b, n in counting_lm.forwards)
    counting_lm.forwards.clear()
    list(decode_shared(counting_lm.model, prompts, 4, None, continuations=answers))
    assert sum(b * n for b, n in counting_lm.forwards) == plain + sum(len(a) - 1 for a in answers)


def test_a_method_that_is_not_causal_cannot_score_on_a_shared_prefill(tiny_lm):
    from ctxbench.model.decoding import decode_shared

    prompts, answers = _prompts(tiny_lm.tokenizer)
    with pytest.raises(ValueError, match="non-causal"):
        list(decode_shared(tiny_lm.model, prompts, 4, None, share=False, continuations=answers))


@pytest.mark.parametrize("task", ["passkey", "niah"])
def test_a_run_with_answer_nll_costs_only_the_answers_tokens_more(counting_lm, task):
    """The metric rides on the prefill decoding does anyway: the tokens through the model grow by
    each trial's answer but its last token, not by a second prefill."""
    from ctxbench.runner.settings import build_settings
    from ctxbench.tasks import get

    def fed(metrics: str | None) -> int:
        counting_lm.forwards.clear()
        extra = {"metrics": metrics} if metrics else {}
        settings = build_settings(get(task), [resolve("yarn")], 2.0, "800", {"trials": 3, **extra})
        records = run_settings(counting_lm, task, settings, seed=1).records
        return sum(b * n for b, n in counting_lm.forwards), records

    plain, _ = fed(None)
    scored, records = fed("answer_nll")
    answer_tokens = sum(json.loads(r["extra"])["answer_tokens"] for r in records if r["trial"] not in ("all", ""))
    trials = sum(1 for r in records if r["trial"] not in ("all", ""))
    assert trials >= 3 and scored == plain + answer_tokens - trials


def test_a_method_that_is_not_causal_scores_each_answer_after_its_whole_prompt(peaked_lm):
    """ms-poe: each trial's prompt in one forward (its head order from the prompt's last token), then
    the answer on that cache, over a group of several cells, as decoding would feed it."""
    from transformers import DynamicCache

    from ctxbench.model.decoding import with_cache

    settings = passkey.Settings(methods=(resolve("ms-poe", {"first_layer": 0}),), factors=(2.0,), lengths=(300,), depths=(0.0, 0.5),
                                trials=2, metrics=("answer_nll",))  # fmt: skip
    records = run_settings(peaked_lm, "passkey", settings, seed=3).records
    tok = peaked_lm.tokenizer
    for depth in (0.0, 0.5):
        for t in range(2):
            p = passkey.build_prompt(tok, 300, depth, passkey.draw_key(3, 300, depth, t, 5))
            answer = list(tok(f" {p.key}", add_special_tokens=False)["input_ids"])
            with applied(peaked_lm.model, peaked_lm.geometry, settings.methods[0], 1.0, 300 + settings.max_new_tokens), torch.no_grad():
                cache = DynamicCache()
                logits = [peaked_lm.model(torch.tensor([list(p.ids)]), **with_cache(peaked_lm.model, cache)).logits[0, -1]]
                for token in answer[:-1]:
                    logits.append(peaked_lm.model(torch.tensor([[token]]), **with_cache(peaked_lm.model, cache)).logits[0, -1])
            expected = F.cross_entropy(torch.stack(logits), torch.tensor(answer)).item()
            row = next(r for r in records if r["metric"] == "correct" and float(r["depth"]) == depth and r["trial"] == str(t))
            assert json.loads(row["extra"])["answer_nll"] == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("task", ["passkey", "niah"])
def test_the_plan_of_a_method_that_is_not_causal_counts_every_prompt_whole(task):
    """ms-poe shares no prefix (each prompt prefilled whole), so its plan counts trials x length
    prompt tokens where a causal method's counts the shared haystack once."""
    from ctxbench.runner.settings import build_settings

    def tokens(label) -> int:
        settings = build_settings(get(task), [resolve(label)], 2.0, "4k", {"trials": 3})
        return sum(sum(expanded_forwards(item)) for item in get(task).cost(settings, 8192))

    depths = 5 if task == "passkey" else 1  # passkey's default depths; niah single_1 draws one place per trial
    assert tokens("ms-poe") == 4096 * 3 * depths
    assert tokens("yarn") < tokens("ms-poe")
