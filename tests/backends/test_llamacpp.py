"""``--backend llamacpp``: llama.cpp through llama-cpp-python, held to transformers.

Without llama-cpp-python (the default install), what the backend refuses and how it writes a
method for llama.cpp are checked: its settings are the export's, flag for flag. With it
(``CTXBENCH_LLAMACPP=1 bash scripts/setup.sh``; marked ``llamacpp``), a tiny random Llama built
here is converted to an F32 GGUF by llama.cpp's own converter and run on llama.cpp: every number
is compared with the transformers backend on the same weights."""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from helpers import ROOT, cli_main, one_error_line, tiny_llama

from ctxbench.backends import llamacpp
from ctxbench.errors import UserError
from ctxbench.methods import METHODS, exportable, resolve
from ctxbench.methods.export import export, llamacpp_settings
from ctxbench.model.geometry import RopeGeometry
from ctxbench.runner.grid import ModelConfig

HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None
GEOM = RopeGeometry(head_dim=64, rotary_dim=64, base=1e5, trained_len=8192)
REQUIRED = {"theta": {"theta": 5e5}, "ntk-alpha": {"scaling_alpha": 50.0}}  # the methods that need a parameter


# --- without llama-cpp-python ----------------------------------------------------------------------


def llama_cpp_reads(flags: list[str]) -> dict:
    """What llama.cpp's own argument parser (common/arg.cpp) sets from ``llama-server`` flags, as the
    ``llama_context_params`` fields llama-cpp-python's ``Llama`` takes: written from arg.cpp here."""
    f = dict(zip(flags[::2], flags[1::2], strict=True))
    out = {"rope_scaling_type": {"none": 0, "linear": 1, "yarn": 2}[f.pop("--rope-scaling")],
           "rope_freq_base": float(f.pop("--rope-freq-base")), "n_ctx": int(f.pop("--ctx-size"))}  # fmt: skip
    if "--rope-scale" in f:
        out["rope_freq_scale"] = 1.0 / float(f.pop("--rope-scale"))  # params.rope_freq_scale = 1.0f / std::stof(value)
    for flag, field, kind in (("--yarn-orig-ctx", "yarn_orig_ctx", int), ("--yarn-ext-factor", "yarn_ext_factor", float),
                              ("--yarn-attn-factor", "yarn_attn_factor", float), ("--yarn-beta-fast", "yarn_beta_fast", float),
                              ("--yarn-beta-slow", "yarn_beta_slow", float)):  # fmt: skip
        if flag in f:
            out[field] = kind(f.pop(flag))
    assert not f, f"flags llama.cpp would not read here: {f}"
    return out


@pytest.mark.parametrize("method", exportable("llamacpp"))
@pytest.mark.parametrize("factor", [2.0, 4.0, 2.5])
def test_the_backend_runs_a_method_with_the_flags_export_prints(method, factor):
    setting = resolve(method, REQUIRED.get(method))
    printed = export(method, factor, "llamacpp", head_dim=64, base=1e5, trained_len="8k", params=REQUIRED.get(method)).split()
    want = llama_cpp_reads(printed)
    got = llamacpp.engine_kwargs(setting, GEOM, factor, want["n_ctx"])
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-15), key  # the printed flags round-trip to the same doubles


def test_export_and_backend_share_one_source_of_their_settings(monkeypatch):
    from ctxbench.methods import export as export_module

    monkeypatch.setattr(export_module, "_llamacpp_flags", lambda setting, geom, factor: {"--rope-scaling": "linear", "--rope-scale": 3.0,
                                                                                          "--rope-freq-base": 123.0, "--ctx-size": 7})  # fmt: skip
    assert export("yarn", 2, "llamacpp", head_dim=64, base=1e5, trained_len="8k") == "--rope-scaling linear --rope-scale 3 --rope-freq-base 123 --ctx-size 7"
    assert llamacpp.engine_kwargs(resolve("yarn"), GEOM, 2.0, 99) == {"rope_scaling_type": 1, "rope_freq_scale": 1 / 3,
                                                                       "rope_freq_base": 123.0, "n_ctx": 99}  # fmt: skip


@pytest.mark.parametrize("method", [m for m in METHODS if m not in exportable("llamacpp")])
def test_a_method_the_export_refuses_is_refused_by_check_in_the_same_words(method):
    setting = resolve(method, {p.name: p.example for p in resolve(method).declarations().values() if p.required})
    reason = setting.export_refusal("llamacpp")
    with pytest.raises(UserError) as exported:
        llamacpp_settings(setting, GEOM, 2.0)
    with pytest.raises(UserError) as checked:
        llamacpp.check([setting], [], ModelConfig(backend="llamacpp"))
    assert reason and reason in str(exported.value) and reason in str(checked.value)
    assert "--backend hf" in checked.value.fix


def test_self_extend_is_refused_as_llama_cpp_python_has_no_group_attention():
    with pytest.raises(UserError, match="self-extend.*changes attention itself"):
        llamacpp.check([resolve("self-extend")], [], ModelConfig(backend="llamacpp"))


def test_yarn_without_truncation_is_refused_before_the_plan_in_the_exports_words():
    engine = llamacpp.LlamaCppEngine(tokenizer=None, geometry=GEOM, name="m", digest="d", device="cpu", dtype="float32", gguf="",
                                     stop=(), engine_version="0")  # fmt: skip
    job = type("Job", (), {"settings": type("S", (), {"methods": (resolve("yarn", {"truncate": False}),), "factors": (2.0,)})()})()
    with pytest.raises(UserError, match="cannot express yarn with truncate=false"):
        engine.check_layouts([job])


@pytest.mark.parametrize("argv,words", [
    (["ppl", "--metrics", "kl"], ["kl", "--backend hf"]),
    (["ppl", "--metrics", "longppl"], ["longppl", "--backend hf"]),
    (["ppl", "--attn", "eager"], ["--attn", "--backend hf"]),
    (["ppl", "--dtype", "bfloat16"], ["bfloat16", "GGUF"]),
    (["passkey", "--method", "none,rerope"], ["rerope", "--backend hf"]),
])  # fmt: skip
def test_llamacpp_refuses_in_one_line_before_the_plan(argv, words, monkeypatch, capsys):
    code, out, err = cli_main([*argv, "--backend", "llamacpp", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, words)
    assert "plan" not in out


def test_llamacpp_not_installed_is_one_line_with_the_install_command(monkeypatch, capsys):
    monkeypatch.setattr(llamacpp, "DIST", "llama-cpp-python-not-installed-here")  # what version() asks importlib.metadata for
    code, _, err = cli_main(["ppl", "--backend", "llamacpp", "--dry-run"], monkeypatch, capsys)
    one_error_line(code, err, ["not installed", "CTXBENCH_LLAMACPP=1"])


def test_setup_builds_the_version_the_backend_names():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert f"LLAMACPP_VERSION={llamacpp.VERSION}" in setup
    assert llamacpp.VERSION in llamacpp.INSTALL


def test_parting_names_the_first_position_beyond_the_tolerance():
    tight = llamacpp.Tolerance(window=(1e-4, 1e-4), position=(1e-3, 1e-3))
    want = torch.full((300,), 2.0)
    got = want.clone()
    assert llamacpp.parting(got, want, tight) is None
    got[130] += 0.01
    assert llamacpp.parting(got, want, tight)[0] == 131  # the NLL of token 131, predicted at position 130
    # a quantized model is held to windows: one position's rounding passes, a drift over a window does not
    windows = llamacpp.Tolerance(window=(0.05, 0.0))
    assert llamacpp.parting(got, want, windows) is None
    got[200:264] += 0.06
    assert llamacpp.parting(got, want, windows)[0] == 193  # the window of positions 193-256


# --- on llama.cpp --------------------------------------------------------------------------------

METHODS_RUN = [("none", None), ("linear", None), ("ntk", None), ("yarn", None), ("yarn", {"beta_fast": 16, "beta_slow": 2}),
               ("theta", {"theta": 5e4}), ("ntk-alpha", {"scaling_alpha": 4.0})]  # fmt: skip
TRAINED = 256  # the tiny model's trained length: 512 and 1k tokens are 2x and 4x it
RTOL = 1e-4  # an F32 GGUF against transformers in float32


def bpe_tokenizer():
    """The byte tokenizer (one token per byte, <s> 256, </s> 257) plus one merge (`` t``, 258): llama.cpp
    loads a BPE vocabulary only with merges, as every real one has."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({"<s>": 256, "</s>": 257, "\u0120t": 258})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("\u0120", "t")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>")


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """A tiny random Llama (weights large enough that positions move the logits), saved, converted
    to an F32 GGUF by llama.cpp's converter, and loaded on both backends."""
    from ctxbench.backends import hf
    from ctxbench.backends.llamacpp_lib import converter_dir

    if not HAS_LLAMACPP:
        pytest.skip("llama-cpp-python is not installed (CTXBENCH_LLAMACPP=1 bash scripts/setup.sh)")
    if converter_dir() is None:
        pytest.skip("llama.cpp's converter is not installed (CTXBENCH_LLAMACPP=1 bash scripts/setup.sh)")
    folder = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    model = tiny_llama(seed=1, initializer_range=0.15, vocab_size=259, max_position_embeddings=TRAINED, head_dim=32, hidden_size=128, num_attention_heads=4,
                       num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})  # fmt: skip
    model.save_pretrained(folder)
    bpe_tokenizer().save_pretrained(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        engine = llamacpp.load(ModelConfig(model=str(folder), backend="llamacpp"))
        reference = hf.load(ModelConfig(model=str(folder), dtype="float32", device="cpu"))
        engine.reference = lambda: reference
        yield engine, reference
    engine.close()


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """The mean NLL (the log of the perplexity, or of the answer's) within 1e-4 relative, and every
    position within the engine check's tolerance for an F32 GGUF."""
    assert got.shape == want.shape and got.dtype == torch.float32
    assert abs(float(got.double().mean()) / float(want.double().mean()) - 1) < RTOL
    assert llamacpp.parting(got, want, llamacpp.TOLERANCE["float32"]) is None


@pytest.mark.llamacpp
@pytest.mark.parametrize("method,params", METHODS_RUN)
@pytest.mark.parametrize("n", [512, 1024])
@pytest.mark.usefixtures("one_thread")
def test_token_nll_equals_transformers_within_1e_4(engines, method, params, n):
    engine, reference = engines
    setting, ids = resolve(method, params), _ids(n)
    with engine.session(setting, 4.0, n) as s:
        got = s.token_nll(ids)
    with reference.session(setting, 4.0, n) as s:
        want = s.token_nll(ids)
    _close(got, want)



@pytest.mark.llamacpp
def test_a_wrong_flag_makes_the_comparison_fail(engines, monkeypatch):
    """The comparison above is not blind to the method: llama.cpp given another factor parts at once."""
    engine, reference = engines
    setting, ids = resolve("linear"), _ids(512)
    with reference.session(setting, 4.0, 512) as s:
        want = s.token_nll(ids)
    engine.close()
    monkeypatch.setitem(llamacpp.FLAG_ARGS, "--rope-scale", ("rope_freq_scale", lambda v: 1.0 / (float(v) + 1)))
    with engine.session(setting, 4.0, 512) as s:
        got = s.token_nll(ids)
    engine.close()
    with pytest.raises(AssertionError):
        _close(got, want)


@pytest.mark.llamacpp
def test_chunked_nll_equals_an_unchunked_reference(engines):
    """Chunks of 7 tokens (the logits never held for the whole sequence) against one decode of the
    whole sequence with every position's logits, log-softmaxed here in float64."""
    import llama_cpp

    engine, _ = engines
    ids = _ids(300, seed=3)
    chunked = llamacpp.LlamaCppEngine(**{**{k: getattr(engine, k) for k in ("tokenizer", "geometry", "name", "digest", "device", "dtype",
                                                                          "gguf", "stop", "engine_version")}, "batch": 7})  # fmt: skip
    with chunked.session(resolve("yarn"), 2.0, 300) as s:
        got = s.token_nll(ids)
    chunked.close()
    kw = llamacpp.engine_kwargs(resolve("yarn"), engine.geometry, 2.0, 300)
    f32 = int(llama_cpp.GGML_TYPE_F32)
    llm = llama_cpp.Llama(model_path=engine.gguf, n_batch=300, n_ubatch=300, logits_all=True, type_k=f32, type_v=f32, verbose=False, **kw)
    llm.eval([int(t) for t in ids])
    logits = torch.from_numpy(llm.scores[: len(ids) - 1].copy()).double()  # (n - 1, vocab): every position at once
    want = -logits.log_softmax(-1).gather(1, ids[1:, None])[:, 0]
    llm.close()
    assert float((got.double() - want).abs().max()) < 1e-5


@pytest.mark.llamacpp
@pytest.mark.usefixtures("one_thread")
def test_sliding_nll_equals_transformers(engines):
    engine, reference = engines
    ids = _ids(700, seed=4)
    with engine.session(resolve("ntk"), 2.0, 256) as s:
        got = s.sliding_nll(ids, window=256, stride=100)
    with reference.session(resolve("ntk"), 2.0, 256) as s:
        want = s.sliding_nll(ids, window=256, stride=100)
    _close(got, want)


def _prompts(n: int) -> list[list[int]]:
    """Prompts sharing a haystack and differing at the end, as passkey's do."""
    hay = [int(t) for t in _ids(n, seed=5)]
    return [hay + [int(t) for t in _ids(6, seed=10 + k)] for k in range(3)]


@pytest.mark.llamacpp
@pytest.mark.parametrize("method", ["none", "yarn"])
@pytest.mark.usefixtures("one_thread")
def test_greedy_answers_and_answer_nll_equal_the_hf_backends(engines, method):
    engine, reference = engines
    prompts, conts = _prompts(500), [[int(t) for t in _ids(4, seed=20 + k)] for k in range(3)]
    with engine.session(resolve(method), 4.0, 520) as s:
        got = {a.index: a for a in s.answers(prompts, 12, continuations=conts)}
    with reference.session(resolve(method), 4.0, 520) as s:
        want = {a.index: a for a in s.answers(prompts, 12, continuations=conts)}
    assert {i: a.tokens for i, a in got.items()} == {i: a.tokens for i, a in want.items()}
    for i in want:
        _close(got[i].nll, want[i].nll)


@pytest.mark.llamacpp
@pytest.mark.usefixtures("one_thread")
def test_scores_equal_the_hf_backends(engines):
    engine, reference = engines
    prompts, conts = _prompts(300), [[int(t) for t in _ids(5, seed=30 + k)] for k in range(3)]
    with engine.session(resolve("linear"), 2.0, 310) as s:
        got = {x.index: x.nll for x in s.scores(prompts, conts)}
    with reference.session(resolve("linear"), 2.0, 310) as s:
        want = {x.index: x.nll for x in s.scores(prompts, conts)}
    for i in want:
        _close(got[i], want[i])


@pytest.mark.llamacpp
def test_answers_stop_at_a_stop_token_and_when_finished(engines):
    engine, _ = engines
    prompts = _prompts(100)
    with engine.session(resolve("none"), 1.0, 120) as s:
        free = {a.index: a.tokens for a in s.answers(prompts, 10)}
        early = {a.index: a.tokens for a in s.answers(prompts, 10, finished=lambda i, seen: len(seen) >= 3)}
    assert all(early[i] == free[i][:3] for i in free if len(free[i]) >= 3)
    stops = {free[0][1]}
    stopping = llamacpp.LlamaCppEngine(**{**{k: getattr(engine, k) for k in ("tokenizer", "geometry", "name", "digest", "device", "dtype",
                                                                           "gguf", "engine_version")}, "stop": tuple(stops)})  # fmt: skip
    with stopping.session(resolve("none"), 1.0, 120) as s:
        stopped = {a.index: a.tokens for a in s.answers(prompts[:1], 10)}
    stopping.close()
    assert stopped[0] == free[0][: free[0].index(free[0][1]) + 1]  # up to and with the first stop token


@pytest.mark.llamacpp
def test_a_thinking_budget_is_steered_as_on_the_hf_backend(engines):
    from ctxbench.model.thinking import Thinking

    engine, reference = engines
    prompts = _prompts(200)
    with engine.session(resolve("none"), 1.0, 220) as s:
        free = {a.index: a.tokens for a in s.answers(prompts, 6)}
    think = Thinking(budget=2, open=free[0][0], close=257)  # the first answer opens a block at once and is forced to close it
    with engine.session(resolve("none"), 1.0, 220) as s:
        got = {a.index: (a.tokens, a.forced) for a in s.answers(prompts, 3, think=think)}
    with reference.session(resolve("none"), 1.0, 220) as s:
        want = {a.index: (a.tokens, a.forced) for a in s.answers(prompts, 3, think=think)}
    assert got == want and got[0][1]


@pytest.mark.llamacpp
def test_hidden_state_metrics_are_refused_in_a_session(engines):
    engine, _ = engines
    with engine.session(resolve("none"), 1.0, 16) as s, pytest.raises(UserError, match="no hidden states"):
        s.hidden(_ids(16))


@pytest.mark.llamacpp
def test_the_engine_check_passes_a_method_llama_cpp_computes_as_transformers(engines):
    engine, reference = engines
    engine.engine_check(reference, resolve("yarn"), 4.0, 1024)
    assert (resolve("yarn"), 4.0, 1024) in engine.checked


@pytest.mark.llamacpp
def test_the_engine_check_refuses_in_one_line_naming_where_they_part(engines, monkeypatch):
    engine, reference = engines
    engine.close()
    monkeypatch.setitem(llamacpp.FLAG_ARGS, "--rope-freq-base", ("rope_freq_base", lambda v: float(v) * 1.5))  # llama.cpp reading another base
    with pytest.raises(UserError) as refused:
        engine.engine_check(reference, resolve("ntk"), 2.0, 512)
    engine.close()
    message = str(refused.value)
    assert "\n" not in message and re.search(r"at position \d+ .*512-token probe", message), message
    assert "ntk x2" in message and "--backend hf" in refused.value.fix


