"""``ctxbench export``: the exported transformers config, loaded natively, gives the logits of
ctxbench's patch; vLLM's overrides and llama.cpp's flags say the same maths; what an engine cannot
express, or input that makes no sense, is one UserError."""

from __future__ import annotations

import ast
import json
import math
import re
import shlex

import numpy as np
import pytest
import torch
from helpers import ROOT
from test_patching import FACTOR, TRAINED, N, assert_close, llama, logits, patched_logits

from ctxbench.errors import UserError
from ctxbench.methods import METHODS, frequencies, resolve
from ctxbench.methods.export import ENGINES, SUPPORTED, export, export_settings
from ctxbench.model.geometry import RopeGeometry

GEOM = dict(head_dim=16, base=10000.0, trained_len=TRAINED)  # the tiny Llama of test_patching
LONG = [1.0 + 0.75 * i for i in range(8)]
SHORT = [1.0 + 0.05 * i for i in range(8)]
ROUND_TRIP = [
    ("none", None), ("linear", None), ("ntk", None), ("theta", {"theta": 5e5}), ("dynamic-ntk", None), ("yarn", None),
    ("yarn", {"beta_fast": 16, "beta_slow": 2, "truncate": False}), ("yarn", {"attention_factor": 1.3}),
    ("llama3", {"low_freq_factor": 2.0, "high_freq_factor": 8.0}), ("longrope", {"factors": LONG}),
    ("ntk-alpha", {"scaling_alpha": 50.0}), ("proportional", {"partial_rotary_factor": 0.5}),
]  # fmt: skip


@pytest.fixture
def ids():
    torch.manual_seed(3)
    return torch.randint(0, 258, (1, N))


def loaded_from(v5: dict, weights) -> torch.nn.Module:
    """The same weights in a model built from the exported transformers >= 5 fields."""
    model = llama(v5["rope_parameters"], max_pos=v5.get("max_position_embeddings", TRAINED))
    model.load_state_dict(weights.state_dict())
    return model


@pytest.mark.parametrize("method,params", ROUND_TRIP, ids=[f"{m}-{p}" for m, p in ROUND_TRIP])
def test_exported_transformers_config_loads_to_the_logits_of_ctxbenchs_patch(method, params, ids):
    out = json.loads(export(method, FACTOR, "transformers", params=params, **GEOM))
    plain = llama()
    ours = patched_logits(plain, method, ids, params=params)
    theirs = logits(loaded_from(out["transformers>=5"], plain), ids)
    assert_close(theirs, ours)
    if method != "none":
        assert (ours - logits(plain, ids)).abs().max() > 1e-2
    # the 4.x fields say the same: rope_scaling is rope_parameters without the base
    v4, v5 = out["transformers<5"], out["transformers>=5"]
    rope = {k: v for k, v in v5["rope_parameters"].items() if k != "rope_theta"}
    assert v4["rope_theta"] == v5["rope_parameters"]["rope_theta"]
    assert v4["rope_scaling"] == (None if rope["rope_type"] == "default" else rope)
    assert v4.get("max_position_embeddings") == v5.get("max_position_embeddings")


def test_native_exports_the_model_as_shipped(tmp_path, ids):
    rope = {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": TRAINED, "attention_factor": 1.2}
    shipped = llama(rope, max_pos=N)
    shipped.save_pretrained(tmp_path / "m")
    out = json.loads(export("native", 1, "transformers", model=str(tmp_path / "m")))
    v5 = out["transformers>=5"]
    assert v5["rope_parameters"] == {"rope_theta": 10000.0, **rope} and v5["max_position_embeddings"] == N
    plain = llama()
    plain.load_state_dict(shipped.state_dict())
    assert_close(logits(loaded_from(v5, plain), ids), logits(shipped, ids), atol=0)
    vllm = export("native", 1, "vllm", model=str(tmp_path / "m"))
    assert vllm.endswith(f"--max-model-len {N}")


def test_export_reads_the_geometry_of_a_model_directory(tmp_path):
    llama().save_pretrained(tmp_path / "m")
    from_model = export_settings("yarn", 4, "transformers", model=str(tmp_path / "m"))
    assert from_model == export_settings("yarn", 4, "transformers", **GEOM)


# --- vLLM --------------------------------------------------------------------------------------


def _vllm(text: str) -> tuple[dict, int]:
    argv = shlex.split(text)
    assert argv[0] == "--hf-overrides" and argv[2] == "--max-model-len"
    return json.loads(argv[1]), int(argv[3])


@pytest.mark.parametrize("method,params", [m for m in ROUND_TRIP if m[0] not in ("dynamic-ntk", "proportional")])
def test_vllm_overrides_carry_the_transformers_rope_parameters(method, params):
    overrides, model_len = _vllm(export(method, FACTOR, "vllm", params=params, **GEOM))
    v5 = export_settings(method, FACTOR, "transformers", params=params, **GEOM)["transformers>=5"]
    rope = dict(v5["rope_parameters"])
    if rope["rope_type"] == "yarn":  # vLLM's attn_factor multiplies 0.1 ln s + 1; transformers' attention_factor replaces it
        a = rope.pop("attention_factor", None)
        if a is not None:
            assert overrides["rope_parameters"].pop("attn_factor") * (0.1 * math.log(FACTOR) + 1) == pytest.approx(a, rel=1e-12)
        if rope["truncate"]:
            rope.pop("truncate")
    assert overrides["rope_parameters"] == rope
    assert model_len == v5.get("max_position_embeddings", int(FACTOR * TRAINED))


# --- llama.cpp ----------------------------------------------------------------------------------


def ggml_rope(flags: list[str], n_dims: int) -> tuple[np.ndarray, float]:
    """Effective (inv_freq, cos/sin scale) of llama.cpp's flags, written from ggml's rope_yarn in float64
    and llama_context's yarn_attn_factor (src/llama-context.cpp: under yarn it is always
    ``get_mscale(s) / (1 + 0.1 ln s)``, whatever --yarn-attn-factor says, and ggml multiplies ``1 + 0.1 ln s`` back)."""
    f = dict(zip(flags[::2], flags[1::2], strict=True))
    base = float(f["--rope-freq-base"])
    freq_scale = 1 / float(f.get("--rope-scale", 1))
    theta = np.array([base ** (-2.0 * i / n_dims) for i in range(n_dims // 2)])
    if f["--rope-scaling"] != "yarn":
        return theta * freq_scale, 1.0
    ext = float(f["--yarn-ext-factor"])
    orig = float(f["--yarn-orig-ctx"])

    def corr_dim(rot):
        return n_dims * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(0.0, math.floor(corr_dim(float(f["--yarn-beta-fast"]))))
    high = min(n_dims - 1.0, math.ceil(corr_dim(float(f["--yarn-beta-slow"]))))
    out = []
    for i in range(n_dims // 2):
        y = (i - low) / max(0.001, high - low)
        ramp_mix = (1 - min(1.0, max(0.0, y))) * ext
        out.append(theta[i] * freq_scale * (1 - ramp_mix) + theta[i] * ramp_mix)
    return np.array(out), 1 + 0.1 * math.log(1 / freq_scale)


@pytest.mark.parametrize("method,params", [("none", None), ("linear", None), ("ntk", None), ("theta", {"theta": 5e5}),
                                           ("ntk-alpha", {"scaling_alpha": 50.0}), ("yarn", None), ("yarn", {"beta_fast": 16, "beta_slow": 2})])  # fmt: skip
@pytest.mark.parametrize("d,base,L,s", [(128, 1e4, 4096, 4.0), (64, 5e5, 8192, 16.0), (80, 1e5, 2048, 2.5)])
def test_llamacpp_flags_give_ctxbenchs_frequencies_and_scale(method, params, d, base, L, s):
    flags = export(method, s, "llamacpp", head_dim=d, base=base, trained_len=L, params=params).split()
    assert flags[-2:] == ["--ctx-size", str(int(s * L))]
    got, got_scale = ggml_rope(flags[:-2], d)
    want, want_scale = frequencies(resolve(method, params), RopeGeometry(d, d, base, L), s, int(s * L))
    np.testing.assert_allclose(got, want.double().numpy(), rtol=2e-6, atol=0)
    assert got_scale == pytest.approx(want_scale, rel=1e-9)


# --- what cannot be exported -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["transformers", "vllm", "llamacpp"])
@pytest.mark.parametrize("method", list(METHODS) + ["ntk+logn", "yarn+rerope", "rerope+logn", "yarn+ssmax", "rerope+ssmax"])
def test_a_method_an_engine_lacks_is_one_user_error_naming_what_it_supports(engine, method, tmp_path):
    setting = resolve(method)
    params = {p.name: p.example for p in setting.declarations().values() if p.required}  # theta, ntk-mixed, ntk-alpha
    supported = method in SUPPORTED[engine]
    if supported and method in ("native", "longrope"):
        return  # need a model with its own scaling / factors: covered above
    if supported and setting.attention is not None:  # dca in vLLM: its own config (tests/test_dca.py)
        assert "dual_chunk_attention_config" in export(method, FACTOR, engine, params=params, **GEOM)
        return
    if supported:
        export(method, FACTOR, engine, params=params, **GEOM)
        return
    with pytest.raises(UserError, match=re.escape(f"{engine} cannot express method '{setting.name}'")) as info:
        export(method, FACTOR, engine, params=params, **GEOM)
    assert f"{engine} supports: {', '.join(SUPPORTED[engine])}" in info.value.fix
    assert "json" in info.value.fix
    json.loads(export(method, FACTOR, "json", params=params, **GEOM))  # ctxbench's own description takes any method


@pytest.mark.parametrize("kwargs,words", [
    (dict(method="yarn", to="tgi", **GEOM), "unknown engine 'tgi'"),
    (dict(method="yarn", to="vlm", **GEOM), "did you mean 'vllm'"),
    (dict(method="yarnn", to="vllm", **GEOM), "unknown method 'yarnn'"),
    (dict(method="yarn", to="vllm"), "export needs a geometry"),
    (dict(method="yarn", to="vllm", params={"beta": 3}, **GEOM), "unknown parameter 'beta'"),
    (dict(method="yarn", to="llamacpp", params={"truncate": False}, **GEOM), "llamacpp cannot express yarn with truncate=false"),
    (dict(method="yarn", to="llamacpp", params={"attention_factor": 1.3}, **GEOM), "llamacpp cannot express yarn with attention_factor=1.3"),
    (dict(method="theta", to="transformers", **GEOM), "method .theta. needs parameter theta"),
    (dict(method="longrope", to="transformers", **GEOM), "longrope needs per-pair rescale factors"),
])  # fmt: skip
def test_bad_input_is_one_user_error(kwargs, words):
    with pytest.raises(UserError, match=words):
        export(factor=FACTOR, **kwargs)


def test_bad_factor_is_a_user_error():
    with pytest.raises(UserError, match="bad factor"):
        export("yarn", 0.5, "vllm", **GEOM)


def test_model_without_rope_has_nothing_to_export_and_no_scaling_method(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_embd=32, n_head=2, n_layer=1, vocab_size=10).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(UserError, match="no RoPE .* nothing|no rope settings to export"):
        export("native", 1, "transformers", model=str(tmp_path / "gpt2"))
    with pytest.raises(UserError, match="has no rotary position embedding .* method 'yarn' cannot apply"):
        export("yarn", 2, "vllm", model=str(tmp_path / "gpt2"))


def test_dynamic_native_model_is_not_exported_to_vllm(tmp_path):
    llama({"rope_type": "dynamic", "factor": 2.0}).save_pretrained(tmp_path / "m")
    with pytest.raises(UserError, match="vllm cannot express this model's own RoPE type 'dynamic'"):
        export("native", 1, "vllm", model=str(tmp_path / "m"))


def test_every_engine_is_listed_and_export_imports_nothing_heavy():
    assert ENGINES == ("transformers", "vllm", "llamacpp", "json")
    tree = ast.parse(ROOT.joinpath("ctxbench/methods/export.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top for a in n.names} | {n.module or "" for n in top if isinstance(n, ast.ImportFrom)}
    assert not names & {"torch", "transformers", "numpy", "pandas", "methods", "models", "geometry"}


def test_cli_export_prints_the_text(capsys, monkeypatch):
    import sys

    from ctxbench.cli import main

    argv = ["ctxbench", "export", "--method", "yarn", "--factor", "4", "--to", "llamacpp",
            "--head-dim", "64", "--base", "10000", "--trained-len", "8k", "--param", "beta_fast=16"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    main()  # returns normally on success
    out = capsys.readouterr().out.strip()
    assert out == export("yarn", 4, "llamacpp", head_dim=64, base=10000, trained_len="8k", params={"beta_fast": 16})
    monkeypatch.setattr(sys, "argv", ["ctxbench", "export", "--method", "rerope", "--to", "vllm", "--head-dim", "64",
                                      "--base", "10000", "--trained-len", "8k"])  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("error: vllm cannot express method 'rerope'")
