"""The vLLM backend asks its engine for prompt log-probabilities and greedy tokens; every task turns
those into the same numbers as the transformers backend. Checked without vLLM: a fake engine answers
``generate`` from the tiny model with the method applied, exactly as vLLM's API shapes its outputs
(``prompt_logprobs``: None, then ``{token: Logprob}`` per position; ``outputs[0].token_ids``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import run_settings

from ctxbench.backends.vllm import VllmEngine
from ctxbench.methods import resolve
from ctxbench.model.decoding import stop_tokens
from ctxbench.tasks import passkey, ppl

pytestmark = pytest.mark.usefixtures("one_thread")


class FakeEngine:
    """``vllm.LLM.generate`` computed by a transformers model with the method applied."""

    def __init__(self, lm, method, factor, seq_len):
        self.lm, self.method, self.factor, self.seq_len = lm, method, factor, seq_len

    @torch.inference_mode()
    def generate(self, prompts, params, use_tqdm=False):
        from ctxbench.methods.patching import applied

        model, outs = self.lm.model, []
        with applied(model, self.lm.geometry, self.method, self.factor, self.seq_len):
            for p in prompts:
                ids = list(p["prompt_token_ids"])
                logp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)  # (n, vocab)
                plp = None
                if getattr(params, "prompt_logprobs", None) is not None:
                    plp = [None] + [{t: SimpleNamespace(logprob=float(logp[i - 1, t]))} for i, t in enumerate(ids) if i > 0]
                new, cur = [], ids
                for _ in range(params.max_tokens):  # greedy, each step a whole forward (the slow, obvious way)
                    token = int(model(torch.tensor([cur])).logits[0, -1].argmax())
                    new.append(token)
                    if token in (getattr(params, "stop_token_ids", None) or []):
                        break
                    cur = [*cur, token]
                outs.append(SimpleNamespace(prompt_logprobs=plp, outputs=[SimpleNamespace(token_ids=new)]))
        return outs


class FakeVllm(VllmEngine):
    def engine(self, method, factor, seq_len):
        self.starts.append(((method.label, factor, seq_len), 0.0))  # (key, seconds), as a real start
        return FakeEngine(self.hf, method, factor, seq_len)


@pytest.fixture
def fake_vllm(tiny_lm):
    lm = FakeVllm(tokenizer=tiny_lm.tokenizer, geometry=tiny_lm.geometry, name=tiny_lm.name, digest=tiny_lm.digest, device="cpu",
                  dtype="float32", checkpoint="", stop=stop_tokens(tiny_lm.model, tiny_lm.tokenizer), engine_version="fake",
                  sampling=SimpleNamespace)  # fmt: skip
    lm.hf = tiny_lm
    return lm


def _values(records, metric, key=("method", "length", "doc")):
    return {tuple(r[k] for k in key): float(r["value"]) for r in records if r["metric"] == metric}


def _ppl_settings(corpus_dir, stride=None):
    return ppl.Settings(methods=[resolve("none"), resolve("yarn")], factors=[2.0], lengths=[32, 100, 200], dataset=str(corpus_dir),
                        docs=2, **({"stride": stride} if stride else {}))  # fmt: skip


def test_perplexity_from_prompt_logprobs_equals_the_hf_path(tiny_lm, fake_vllm, corpus_dir):
    hf = run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir)).records
    engine = run_settings(fake_vllm, "ppl", _ppl_settings(corpus_dir)).records
    want, got = _values(hf, "nll"), _values(engine, "nll")
    assert want.keys() == got.keys() and len(want) == 2 * 3 * 3  # two methods, three lengths, two documents and all
    assert max(abs(want[k] - got[k]) for k in want) < 1e-5


def test_sliding_windows_score_the_same_tokens_as_the_hf_path(tiny_lm, fake_vllm, corpus_dir):
    hf = run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir, stride=16)).records
    engine = run_settings(fake_vllm, "ppl", _ppl_settings(corpus_dir, stride=16)).records
    want, got = _values(hf, "nll"), _values(engine, "nll")
    assert want.keys() == got.keys()
    assert max(abs(want[k] - got[k]) for k in want) < 1e-5
    tokens = lambda rs: {(r["method"], r["length"], r["doc"]): r["tokens"] for r in rs if r["metric"] == "nll"}  # noqa: E731
    assert tokens(hf) == tokens(engine)  # every token scored once, on both


def _passkey_settings(**kw):
    base = dict(methods=[resolve("none"), resolve("yarn")], factors=[2.0], lengths=[300], depths=[0.0, 1.0], trials=2)
    return passkey.Settings(**{**base, **kw})


def test_passkey_answers_and_answer_nll_equal_the_hf_path(tiny_lm, fake_vllm):
    settings = _passkey_settings(metrics=("answer_nll",))
    hf = run_settings(tiny_lm, "passkey", settings).records
    engine = run_settings(fake_vllm, "passkey", settings).records
    trial = lambda rs: {(r["method"], r["depth"], r["trial"]): (r["answer"], r["value"]) for r in rs if r["metric"] == "correct"}  # noqa: E731
    assert trial(hf) == trial(engine) and len(trial(hf)) == 2 * 2 * 2
    want = _values(hf, "answer_nll", ("method", "depth", "trial"))
    got = _values(engine, "answer_nll", ("method", "depth", "trial"))
    assert want.keys() == got.keys() and max(abs(want[k] - got[k]) for k in want) < 1e-5


def test_each_engine_is_asked_for_its_method_factor_and_length(fake_vllm, corpus_dir):
    run_settings(fake_vllm, "ppl", _ppl_settings(corpus_dir))
    # one shared pass per method at the longest length (a causal, length-independent method)
    assert [key for key, _ in fake_vllm.starts] == [("none", 1.0, 200), ("yarn", 2.0, 200)]  # none ignores the factor


def test_rows_name_the_engine_and_its_version(fake_vllm, tiny_lm, corpus_dir):
    engine = run_settings(fake_vllm, "ppl", _ppl_settings(corpus_dir)).records
    hf = run_settings(tiny_lm, "ppl", _ppl_settings(corpus_dir)).records
    assert {r["backend"] for r in engine} == {"vllm fake"}
    assert {r["backend"] for r in hf} == {"hf"}


def test_a_cell_past_the_end_of_the_engines_yarn_table_is_refused_before_any_engine_starts(fake_vllm):
    from ctxbench.errors import UserError
    from ctxbench.runner.grid import Job, execute
    from ctxbench.tasks import get

    table = 8 * fake_vllm.geometry.trained_len  # vLLM's yarn x8 table: the original length times the factor
    job = Job(get("passkey"), _passkey_settings(factors=[8.0], lengths=[table]))  # the prompt fills the table; its answer runs past it
    with pytest.raises(UserError, match=f"yarn x8's rotary table for {table} positions .* needs {table} \\+ 10 answer tokens"):
        execute([job], fake_vllm)
    assert fake_vllm.starts == []


def test_a_cell_whose_answer_fits_the_engines_yarn_table_runs(fake_vllm):
    from ctxbench.runner.grid import Job, execute
    from ctxbench.tasks import get

    table = 8 * fake_vllm.geometry.trained_len
    settings = _passkey_settings(methods=[resolve("yarn")], factors=[8.0], lengths=[table - 10], trials=1, depths=[0.0])
    execute([Job(get("passkey"), settings)], fake_vllm)
    assert fake_vllm.starts  # ran: the prompt and its 10 answer tokens end at the table's last position
