"""The architectures users deploy (tiny random-weight checkpoints with each real model's RoPE settings,
:mod:`architectures`), on both backends: ``native`` is the shipped configuration, each method runs or is
refused before the plan with its reason, and ``results/architectures.csv`` (the docs' table) says what
the refusal rules say. The tests marked ``vllm`` run each architecture on vLLM against transformers."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from architectures import (
    ARCHITECTURES,
    BACKENDS,
    FACTOR,
    build,
    config_of,
    geometry_of,
    methods,
    random_model,
    refusal,
)
from helpers import RESULTS, one_error_line, read_csv

from ctxbench.errors import UserError
from ctxbench.methods import frequencies, resolve

pytestmark = pytest.mark.usefixtures("one_thread")
TABLE = RESULTS / "architectures.csv"
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _shipped_tables(model, geom) -> list[tuple[torch.Tensor, float]]:
    """``(inv_freq, attention_scaling)`` of the rotary tables a method rewrites, as the model was built."""
    from ctxbench.methods.patching import rotary_tables

    return [(getattr(m, f"{prefix}inv_freq"), float(getattr(m, f"{prefix}attention_scaling", 1.0)))
            for m, prefix in rotary_tables(model, geom)]  # fmt: skip


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_native_is_the_shipped_rope_of_each_architecture_on_transformers(name):
    model, geom = random_model(name), geometry_of(name)
    # as built, a rope type transformers recomputes per length (Phi-3.5's longrope) holds the original length's table
    inv_freq, scale = frequencies(resolve("native"), geom, 1.0, geom.trained_len)
    for held, held_scale in _shipped_tables(model, geom):
        torch.testing.assert_close(held.float(), inv_freq.float(), rtol=0, atol=0)
        assert math.isclose(held_scale, scale, rel_tol=1e-6)


def test_the_geometry_reads_each_architectures_rope():
    """Partial rotary (GPT-NeoX: a quarter of the head), Gemma-3's full-attention layers (base 1M,
    linear x8) with its sliding layers kept as shipped, Phi-3.5's original length."""
    neox, gemma, phi = geometry_of("gpt-neox"), geometry_of("gemma-3"), geometry_of("phi-3.5")
    assert (neox.head_dim, neox.rotary_dim) == (32, 8)
    assert (gemma.base, gemma.native["rope_type"], gemma.native["factor"], gemma.layer_type) == (1e6, "linear", 8.0, "full_attention")
    assert gemma.other_layers == {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    assert (phi.trained_len, phi.native["rope_type"], len(phi.native["long_factor"])) == (4096, "longrope", phi.pairs)


@pytest.mark.parametrize("method", ["none", "yarn", "native"])
def test_gemma3s_vllm_overrides_keep_every_layer_types_rope(method):
    """vLLM's gemma3.py reads ``rope_parameters[layer_type]``: a single entry crashed it (KeyError 'sliding_attention')."""
    from ctxbench.backends.vllm import engine_settings
    from ctxbench.methods.export import vllm_settings

    geom = geometry_of("gemma-3")
    rope = engine_settings(resolve(method), geom, FACTOR, 1024)["hf_overrides"]["rope_parameters"]
    assert set(rope) == {"sliding_attention", "full_attention"}
    assert rope["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    flat = vllm_settings(resolve(method), geometry_of("llama-3.1"), FACTOR)["hf_overrides"]["rope_parameters"]
    assert rope["full_attention"]["rope_type"] == ({"native": "linear"}.get(method) or flat["rope_type"])


@pytest.mark.parametrize("method", ["yarn", "native"])
def test_gemma3s_transformers_export_keeps_every_layer_types_rope(method, tmp_path):
    """transformers 5 reads Gemma-3's ``rope_parameters`` per layer type: the export keys them so, the
    method on the full-attention layers; 4.x's flat ``rope_scaling`` applies to those layers alone."""
    from ctxbench.methods.export import export_settings

    out = export_settings(method, FACTOR, "transformers", model=str(build("gemma-3", tmp_path / "gemma")))
    rope = out["transformers>=5"]["rope_parameters"]
    assert set(rope) == {"sliding_attention", "full_attention"}
    assert rope["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert rope["full_attention"]["rope_type"] == {"native": "linear"}.get(method, method)
    assert out["transformers<5"]["rope_scaling"]["rope_type"] == rope["full_attention"]["rope_type"]


def _table(inv_freq, scale, positions):
    angles = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq.float()[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1) * scale  # (positions, rotary_dim)


def test_the_engine_check_holds_each_layer_type_to_its_own_rope():
    from ctxbench.backends.vllm import _shipped, compare_tables

    geom, yarn, n = geometry_of("gemma-3"), resolve("yarn"), 1024
    full = _table(*frequencies(yarn, geom, FACTOR, n), n)
    sliding = _table(*frequencies(resolve("native"), _shipped(geom, "sliding_attention"), 1.0, n), n)
    types = ("sliding_attention", "sliding_attention", "full_attention")
    found = {"rotary": [("RotaryEmbedding", sliding, (0, 1)), ("LinearScalingRotaryEmbedding", full, (2,))], "scales": [geom.head_dim**-0.5]}
    compare_tables(found, yarn, geom, FACTOR, n, dtype="torch.float32", layer_types=types)
    wrong = {"rotary": [("RotaryEmbedding", full, (0, 1)), ("YaRNScalingRotaryEmbedding", full, (2,))], "scales": []}
    with pytest.raises(UserError, match=r"does not compute the 'sliding_attention' layers' shipped RoPE"):
        compare_tables(wrong, yarn, geom, FACTOR, n, dtype="torch.float32", layer_types=types)


def test_the_engine_check_reads_a_partial_rotary_table():
    """GPT-NeoX rotates 8 of its 32 head dims: the engine's table is (positions, 8)."""
    from ctxbench.backends.vllm import compare_tables

    geom, ntk, n = geometry_of("gpt-neox"), resolve("ntk"), 1024
    table = _table(*frequencies(ntk, geom, FACTOR, n), n)
    assert table.shape == (n, 8)
    compare_tables({"rotary": [("GPTNeoXRotaryEmbedding", table, ())], "scales": []}, ntk, geom, FACTOR, n, dtype="torch.float32")
    with pytest.raises(UserError, match="does not compute ntk x2"):
        compare_tables({"rotary": [("GPTNeoXRotaryEmbedding", _table(*frequencies(resolve("none"), geom, FACTOR, n), n), ())],
                        "scales": []}, ntk, geom, FACTOR, n, dtype="torch.float32")  # fmt: skip


def test_a_transformers_rotary_module_gives_the_table_it_computes():
    """vLLM runs GPT-NeoX and OLMo-2 through its transformers modeling backend: the table is read from
    transformers' own rotary module (``inv_freq``, ``attention_scaling``)."""
    from ctxbench.backends.vllm import _tables

    model = random_model("gpt-neox")
    [(cls, table, layers)] = _tables(model, positions=300)["rotary"]
    inv_freq, scale = frequencies(resolve("none"), geometry_of("gpt-neox"), 1.0, 300)
    torch.testing.assert_close(table, _table(inv_freq, scale, 300))
    assert cls == "GPTNeoXRotaryEmbedding" and layers == ()


def test_a_rope_type_only_vllm_has_is_refused_on_a_model_vllm_runs_through_transformers():
    from ctxbench.backends.vllm import check_model_method

    setting = resolve("ntk-mixed", {"mixed_b": 0.625})
    with pytest.raises(UserError, match=r"model type 'gpt_neox' through its transformers modeling backend, whose RoPE has no 'ntk' type"):
        check_model_method(setting, geometry_of("gpt-neox"), FACTOR)
    check_model_method(setting, geometry_of("llama-3.1"), FACTOR)  # vLLM's own Llama has it
    check_model_method(resolve("yarn"), geometry_of("gpt-neox"), FACTOR)  # transformers has yarn


# ---- the committed table ------------------------------------------------------------------------


def _rows() -> dict[tuple[str, str, str], dict]:
    _, rows = read_csv(TABLE)
    return {(r["architecture"], r["backend"], r["method"]): r for r in rows}


def test_the_table_has_every_architecture_backend_and_method_once():
    _, rows = read_csv(TABLE)
    keys = [(r["architecture"], r["backend"], r["method"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert set(keys) == {(a, b, m) for a in ARCHITECTURES for b in BACKENDS for m in methods()}
    assert {r["status"] for r in rows} <= {"ok", "refused", "differs", "failed"}
    assert all(r["vllm"] and r["transformers"] and r["date"] for r in rows), "every row says what produced it"


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_table_says_what_the_refusal_rules_say(name):
    """Stale when a refusal rule changed and ``scripts/architectures.py`` did not run again."""
    rows, model = _rows(), random_model(name)
    for backend in BACKENDS:
        for method in methods():
            row, reason = rows[(name, backend, method)], refusal(backend, name, method, model)
            if reason is not None:
                assert (row["status"], row["reason"]) == ("refused", reason), (name, backend, method)
            else:
                assert row["status"] != "refused", f"{name} {backend} {method}: the table says refused, the rules let it run: rerun scripts/architectures.py"


def test_every_architecture_runs_on_both_backends_what_it_is_not_refused():
    """The acceptance: every cell not refused ran, and agreed (vLLM within 1% perplexity)."""
    bad = [f"{k}: {r['status']} {r['reason']}" for k, r in _rows().items() if r["status"] in ("failed", "differs")]
    assert not bad, bad


# ---- on vLLM ---------------------------------------------------------------------------------------


def _values(lm, method):
    import ctxbench

    kw = dict(method=method, factor=FACTOR, length="512", seed=0)
    keys = ctxbench.run(task="passkey", model=lm, trials=1, depths="0.5", metrics="answer_nll", **kw)
    ppl = ctxbench.run(task="ppl", model=lm, docs=1, **kw)
    return (float(ppl[(ppl.metric == "ppl") & (ppl.doc == "all")].value.iloc[0]),
            float(keys[keys.metric == "answer_nll"].value.iloc[0]))  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """Every architecture's checkpoint, saved before any engine starts: vLLM's transformers modeling
    backend patches a class it runs (GPT-NeoX, OLMo-2) in-process, and transformers then cannot build
    that class outside an engine ('Current vLLM config is not set')."""
    root = tmp_path_factory.mktemp("architectures")
    return {name: str(build(name, root / name)) for name in ARCHITECTURES}


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHITECTURES)
@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (CTXBENCH_VLLM=1 bash scripts/setup.sh)")
def test_each_architecture_computes_on_vllm_what_transformers_does(name, checkpoints):
    """``native`` and ``yarn`` x2 at 512 tokens, float32: the engine check passes (an engine that computed
    another table is refused when it starts), perplexity within 1% and the answer NLL within 5%."""
    from ctxbench.backends import vllm
    from ctxbench.backends.hf import load_model as load
    from ctxbench.report.parity import RTOL
    from ctxbench.runner.grid import ModelConfig

    path = checkpoints[name]
    hf_lm = load(path, device="cpu", dtype="float32", attn="sdpa")
    # every transformers number first: vLLM's transformers modeling backend (GPT-NeoX, OLMo-2) patches the class in-process
    reference = {m: _values(hf_lm, m) for m in ("native", "yarn")}
    lm = vllm.load(ModelConfig(model=path, backend="vllm", dtype="float32"))
    try:
        for method, (ppl, nll) in reference.items():
            got_ppl, got_nll = _values(lm, method)
            assert abs(got_ppl - ppl) / ppl < RTOL["ppl"], (name, method, got_ppl, ppl)
            assert abs(got_nll - nll) / nll < RTOL["answer_nll"], (name, method, got_nll, nll)
    finally:
        lm.close()


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (CTXBENCH_VLLM=1 bash scripts/setup.sh)")
def test_a_method_vllm_cannot_run_on_an_architecture_is_refused_before_the_plan(checkpoints, tmp_path, monkeypatch, capsys):
    from helpers import cli_main

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))  # its own cache: no note about another version's entries
    path = checkpoints["gpt-neox"]
    capsys.readouterr()  # what saving the checkpoint printed
    code, out, err = cli_main(["ppl", "--backend", "vllm", "--model", path, "--dtype", "float32", "--method", "ntk-mixed",
                               "--param", "mixed_b=0.625", "--len", "512", "--docs", "1"], monkeypatch, capsys)  # fmt: skip
    one_error_line(code, err, ["gpt_neox", "transformers modeling backend", "'ntk'", "--backend hf"])
    assert "plan" not in out.lower()


def test_config_of_gives_each_architectures_model_type():
    assert [config_of(n).model_type for n in ARCHITECTURES] == ["llama", "qwen2", "qwen3", "phi3", "gemma3_text", "gpt_neox", "mistral", "olmo2"]


def test_phi35s_longrope_at_exactly_its_original_length_is_refused_on_vllm():
    """vLLM picks the long factors once max_model_len (n + 1) passes the original length, transformers
    past it: at n = 4096 they differ (the engine check found it), one token either side they agree."""
    from ctxbench.methods import vllm_longrope_switch as longrope_switch
    from ctxbench.methods.export import method_rope, vllm_settings

    geom = geometry_of("phi-3.5")
    rope = method_rope(vllm_settings(resolve("native"), geom, 1.0)["hf_overrides"]["rope_parameters"], geom)
    assert "short factors in transformers" in longrope_switch(rope, 4096)
    assert longrope_switch(rope, 4095) is None and longrope_switch(rope, 4097) is None
    yarn = method_rope(vllm_settings(resolve("yarn"), geom, 2.0)["hf_overrides"]["rope_parameters"], geom)
    assert longrope_switch(yarn, 4096) is None
