"""The vLLM backend on the real default model, where vLLM is installed (``CTXBENCH_VLLM=1 bash
scripts/setup.sh``; CI installs it): a passkey cell and a perplexity cell agree with transformers,
and an engine handed a wrong rope override is refused. Without vLLM these skip with the reason."""

from __future__ import annotations

import importlib.util

import pytest

from ctxbench.errors import UserError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (CTXBENCH_VLLM=1 bash scripts/setup.sh)"),
]


@pytest.fixture(scope="module")
def vllm_lm():
    from ctxbench.backends import vllm
    from ctxbench.runner.grid import ModelConfig

    lm = vllm.load(ModelConfig(backend="vllm", dtype="bfloat16"))
    yield lm
    lm.close()


def _run(lm, task, **kw):
    import ctxbench

    return ctxbench.run(task=task, model=lm, **kw)


def test_a_passkey_cell_answers_as_transformers_does(vllm_lm, real_lm):
    kw = dict(method="none,yarn", factor=2, length="2k", trials=1, depths="0.5")
    hf, engine = _run(real_lm, "passkey", **kw), _run(vllm_lm, "passkey", **kw)
    answers = lambda f: f[f.metric == "correct"].set_index(["label", "trial"])["answer"].to_dict()  # noqa: E731
    assert answers(hf) == answers(engine) and len(answers(hf)) == 2
    assert set(engine.backend) == {f"vllm {vllm_lm.engine_version}"} and set(engine.dtype) == {"bfloat16"}


def test_a_perplexity_cell_is_within_the_bf16_tolerance(vllm_lm, real_lm):
    from ctxbench.report.parity import RTOL

    kw = dict(method="yarn", factor=2, length="1k", docs=1)
    ppl = lambda f: float(f[(f.metric == "ppl") & (f.doc == "all")].value.iloc[0])  # noqa: E731
    hf, engine = ppl(_run(real_lm, "ppl", **kw)), ppl(_run(vllm_lm, "ppl", **kw))
    assert abs(engine - hf) / hf < RTOL["ppl"]


def test_an_engine_given_a_wrong_override_is_refused(vllm_lm):
    from ctxbench.backends.vllm import engine_settings, start_engine
    from ctxbench.methods import resolve

    yarn = resolve("yarn")
    wrong = engine_settings(yarn, vllm_lm.geometry, 2.0, 2048)["hf_overrides"]
    wrong["rope_parameters"] = {**wrong["rope_parameters"], "factor": 3.0}  # the engine reads a factor other than the method's
    vllm_lm.close()
    with pytest.raises(UserError, match=r"does not compute yarn x2 as ctxbench does"):
        start_engine(vllm_lm, yarn, 2.0, 2048, overrides=wrong)


def test_a_method_vllm_cannot_run_is_refused_before_loading(monkeypatch, capsys):
    from helpers import cli_main, one_error_line

    code, _, err = cli_main(["passkey", "--backend", "vllm", "--method", "rerope"], monkeypatch, capsys)
    one_error_line(code, err, ["rerope", "--backend hf"])


LONGBENCH2_ITEMS = [
    {"_id": f"i{i}", "domain": "d", "difficulty": "easy", "length": "short",
     "question": f"What color is the box in room {i}?", "context": f"The box in room {i} is painted blue. " * 30,
     "choices": ["red", "blue", "green", "white"], "answer": "B"}
    for i in range(2)
]  # fmt: skip


def test_longbench2_runs_both_modes_on_vllm_as_on_transformers(vllm_lm, real_lm, tmp_path):
    """The task on a file made here (the ``choices`` layout): ``mc`` picks the letters transformers
    picks, each letter's NLL within 0.25 nats of float32 transformers' (vLLM here runs bf16, whose
    logits are rounded to 2^-8 of their size: measured up to 0.13 nats on one letter, 2026-11-28);
    ``generate`` gives a right-or-wrong row per item, as on transformers."""
    import json

    data = tmp_path / "lb2.jsonl"
    data.write_text("\n".join(json.dumps(item) for item in LONGBENCH2_ITEMS))
    kw = dict(method="none", length="1k", trials=2, data=str(data), variants="short")
    scores = lambda f: f[f.metric == "score"].sort_values("trial")  # noqa: E731
    hf, engine = scores(_run(real_lm, "longbench2", mode="mc", **kw)), scores(_run(vllm_lm, "longbench2", mode="mc", **kw))
    assert list(hf.answer) == list(engine.answer) and len(hf) == 2
    for a, b in zip(hf.extra, engine.extra, strict=True):
        want, got = json.loads(a)["letter_nll"], json.loads(b)["letter_nll"]
        assert all(abs(got[x] - want[x]) < 0.25 for x in "ABCD"), (want, got)
    generated = scores(_run(vllm_lm, "longbench2", mode="generate", **kw))
    assert len(generated) == 2 and set(generated.value.astype(float)) <= {0.0, 1.0}
    assert set(generated.backend) == {f"vllm {vllm_lm.engine_version}"}
