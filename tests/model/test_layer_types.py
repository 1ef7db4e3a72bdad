"""Per-layer-type RoPE (Gemma 3): a method applies to the full-attention layers, sliding layers keep theirs.

transformers 5.24 (``models/gemma3/configuration_gemma3.py``, ``modeling_gemma3.py``):
``rope_parameters`` is keyed by layer type, a legacy ``rope_scaling`` lands on ``full_attention``
only, and ``Gemma3RotaryEmbedding`` holds one table per type (``full_attention_inv_freq``,
``sliding_attention_inv_freq``, ...). The reference for a method is transformers' own Gemma 3 built
with that method's rope parameters on ``full_attention`` and the original ones on
``sliding_attention``.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
import transformers
from helpers import save_with_tokenizer

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.model.geometry import RopeGeometry

pytestmark = pytest.mark.usefixtures("one_thread")

TRAINED, WINDOW, VOCAB = 64, 8, 258
N = 4 * TRAINED  # past the trained length, far past the sliding window
TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
SHIPPED = {
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e5},  # as Gemma 3: linear on global only
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
}


def gemma3(full: dict | None = None, seed: int = 0) -> transformers.Gemma3ForCausalLM:
    torch.manual_seed(seed)
    cfg = transformers.Gemma3TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=len(TYPES),
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=TRAINED, sliding_window=WINDOW,
        layer_types=TYPES, initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        rope_parameters={"full_attention": dict(full or SHIPPED["full_attention"]),
                         "sliding_attention": dict(SHIPPED["sliding_attention"])},
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return transformers.Gemma3ForCausalLM(cfg).eval()


def logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs).logits


def patched(model, spec, ids, factor=1.0, params=None):
    with applied(model, RopeGeometry.from_config(model.config), resolve(spec, params), factor, ids.shape[1]):
        return logits(model, ids)


def diff(a, b) -> float:
    return (a - b).abs().max().item()


@pytest.fixture(scope="module")
def model():
    return gemma3()


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(3)
    return torch.randint(0, VOCAB, (1, N))


def tables(model) -> dict:
    rotary = model.model.rotary_emb
    return {name: buf.clone() for name, buf in rotary.named_buffers()} | {
        "rope_type": dict(rotary.rope_type),
        **{f"{t}_attention_scaling": getattr(rotary, f"{t}_attention_scaling") for t in set(TYPES)},
    }


def test_geometry_is_the_full_attention_layers():
    geom = RopeGeometry.from_config(gemma3().config)
    assert (geom.layer_type, geom.base, geom.rotary_dim, geom.trained_len) == ("full_attention", 1e5, 16, TRAINED)
    assert geom.native == {"rope_type": "linear", "factor": 2.0}


def test_native_is_the_model_as_shipped_past_the_trained_length(model, ids):
    assert diff(patched(model, "native", ids), logits(model, ids)) == 0.0


@pytest.mark.parametrize("spec,factor,rope", [
    ("yarn", 4.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED}),
    ("linear", 4.0, {"rope_type": "linear", "factor": 4.0}),
    ("none", 1.0, {"rope_type": "default"}),
])  # fmt: skip
def test_frequency_method_is_transformers_gemma3_with_it_on_full_attention(model, ids, spec, factor, rope):
    reference = gemma3({**rope, "rope_theta": 1e5})
    reference.load_state_dict(model.state_dict())
    assert diff(patched(model, spec, ids, factor), logits(reference, ids)) <= 1e-5


def test_sliding_tables_untouched_while_applied_and_everything_restored(ids):
    model = gemma3()  # fresh: the shared one has been through other tests
    before = tables(model)
    geom = RopeGeometry.from_config(model.config)
    for spec in ("yarn", "rerope"):
        with applied(model, geom, resolve(spec), 4.0, N):
            now = tables(model)
            for name in ("sliding_attention_inv_freq", "sliding_attention_original_inv_freq", "full_attention_original_inv_freq"):
                assert torch.equal(now[name], before[name]), name
            assert now["sliding_attention_attention_scaling"] == before["sliding_attention_attention_scaling"]
            assert now["rope_type"] == {**before["rope_type"], "full_attention": "default"}
            assert not torch.equal(now["full_attention_inv_freq"], before["full_attention_inv_freq"])
        after = tables(model)
        assert after.keys() == before.keys()
        for name, value in before.items():
            assert torch.equal(after[name], value) if isinstance(value, torch.Tensor) else after[name] == value, name
    assert model.config._attn_implementation == "sdpa"
    assert diff(logits(model, ids), logits(gemma3(), ids)) == 0.0


@pytest.mark.parametrize("spec,params", [("rerope", {"window": 48}), ("logn", None), ("self-extend", {"window": 48})])
def test_attention_methods_keep_the_sliding_layers_windows(model, ids, spec, params):
    """At 48 tokens (< L, > the window of 8) these methods are plain RoPE on the full layers; the sliding
    layers must still see only their window, in a prefill and in a decoding step after a cache."""
    short = ids[:, :48]
    assert diff(patched(model, spec, short, params=params), patched(model, "none", short)) <= 1e-5
    geom = RopeGeometry.from_config(model.config)
    steps = {}
    for name, p in ((spec, params), ("none", None)):
        with applied(model, geom, resolve(name, p), 1.0, 48), torch.no_grad():
            out = model(short[:, :40], use_cache=True)
            step = model(short[:, 40:41], past_key_values=out.past_key_values, use_cache=True)
            steps[name] = step.logits
    assert diff(steps[spec], steps["none"]) <= 1e-5


def test_an_attention_method_still_changes_the_full_layers(model, ids):
    assert diff(patched(model, "rerope", ids[:, :48], params={"window": 8}), patched(model, "none", ids[:, :48])) > 1e-2


def test_an_attention_method_on_a_layer_it_cannot_keep_is_one_error(ids):
    model = gemma3()
    odd = model.model.layers[0].self_attn
    odd.layer_type, odd.sliding_window = "chunked_attention", None
    geom = RopeGeometry.from_config(model.config)
    with pytest.raises(UserError, match="method 'rerope' cannot run on .* layer 0 \\(layer type 'chunked_attention'\\)"):
        with applied(model, geom, resolve("rerope"), 1.0, 48):
            pass
    assert all(not hasattr(m, "_ctxbench_plan") for m in model.modules())
    assert model.config._attn_implementation == "sdpa"
    assert diff(patched(model, "yarn", ids, 4.0), patched(gemma3(), "yarn", ids, 4.0)) == 0.0  # frequency methods still run


def test_per_layer_types_without_full_attention_is_one_error():
    config = SimpleNamespace(
        model_type="chunky", layer_types=["sliding_attention", "chunked_attention"], head_dim=16, hidden_size=64,
        num_attention_heads=4, max_position_embeddings=TRAINED,
        rope_parameters={"sliding_attention": {"rope_theta": 1e4}, "chunked_attention": {"rope_theta": 1e5}},
    )  # fmt: skip
    with pytest.raises(UserError, match="keys its RoPE by layer type .* no 'full_attention' layers"):
        RopeGeometry.from_config(config)


def test_gemma4_native_is_the_model_as_shipped_and_other_methods_one_error():
    """Gemma 4: full layers with their own head dim (per_layer_config) and proportional RoPE, whose
    table holds d/2 frequencies (zeros past the rotated ones): native runs; a method computing only the
    rotated frequencies is refused by the frequency count, not mis-patched."""
    torch.manual_seed(0)
    cfg = transformers.Gemma4TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, num_hidden_layers=2,
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=TRAINED, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    model = transformers.Gemma4ForCausalLM(cfg).eval()
    short = torch.randint(0, VOCAB, (1, 2 * TRAINED))
    assert diff(patched(model, "native", short), logits(model, short)) == 0.0
    with pytest.raises(UserError, match="rotary module has 16 frequencies, method .yarn. computed 4"):
        patched(model, "yarn", short, 2.0)


# --- through the CLI ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_with_tokenizer(gemma3(), tmp_path_factory.mktemp("gemma3") / "model")


def _cli(argv, workdir, monkeypatch, capsys):
    from ctxbench.cli import main

    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(workdir / ".cache"))
    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr()


def _saved_with_corpus(model, tmp_path, methods: str) -> list[str]:
    """``model`` and the byte tokenizer saved to ``tmp_path/model``, a one-document corpus beside
    it; returns the ``ppl`` argv that runs ``methods`` on them (relative paths: run in ``tmp_path``)."""
    save_with_tokenizer(model, tmp_path / "model")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 20)
    return ["ppl", "--model", "model", "--dataset", "corpus", "--len", "128", "--docs", "1", "--factor", "2",
            "--method", methods, "--out", "results.csv", "--device", "cpu"]  # fmt: skip


def test_cli_runs_a_gemma3_model(saved, tmp_path, monkeypatch, capsys):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 20)
    argv = ["ppl", "--model", str(saved), "--dataset", "corpus", "--len", "128", "--docs", "1", "--factor", "2",
            "--method", "native,yarn,rerope", "--out", "results.csv", "--device", "cpu"]  # fmt: skip
    code, captured = _cli(argv, tmp_path, monkeypatch, capsys)
    assert code in (0, None), captured.err
    assert "3 cell(s) run" in captured.out
    assert "different RoPE per layer type" not in captured.err + captured.out



def test_cli_refusal_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """A Gemma 3 whose layers are all sliding (two layers, the default pattern of five sliding to one
    full) has no full-attention RoPE for a method to apply to: one line, exit 2, before any plan."""
    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=TRAINED, sliding_window=WINDOW,
        bos_token_id=256, eos_token_id=257, pad_token_id=257,
    )  # fmt: skip
    assert set(cfg.layer_types) == {"sliding_attention"}
    argv = _saved_with_corpus(transformers.Gemma3ForCausalLM(cfg), tmp_path, "yarn")
    code, captured = _cli(argv, tmp_path, monkeypatch, capsys)
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], captured.err
    assert "keys its RoPE by layer type (sliding_attention) with no 'full_attention' layers" in lines[0]
    assert "Traceback" not in captured.err and "results ->" not in captured.out
    assert not (tmp_path / "results.csv").exists()


def test_the_cost_model_counts_each_layers_own_head_dim_on_a_model_whose_layers_differ():
    """Gemma 4's config refuses a global head_dim (AmbiguousGlobalPerLayerAttributeError); the plan
    reads each layer's: sliding layers at head dim 16, full ones at 32."""
    from ctxbench.model.size import ModelSize

    cfg = transformers.Gemma4TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, num_hidden_layers=2,
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=TRAINED, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    per_layer = [64 * 4 * hd * 2 + 64 * 2 * hd * 2 + 3 * 64 * 64 for hd in (16, 32)]  # q, o; k, v; gated MLP
    assert ModelSize.from_config(cfg).params == sum(per_layer)


def test_a_gemma4_method_that_does_not_fit_its_rotary_table_is_refused_before_the_plan(tmp_path, monkeypatch, capsys):
    """Gemma 4 plans (its per-layer head dims counted) and runs native; yarn, whose table does not
    fit the model's, is one line and exit 2 before any plan, cell or results file."""
    torch.manual_seed(0)
    cfg = transformers.Gemma4TextConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32, num_hidden_layers=2,
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=TRAINED, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"], bos_token_id=256, eos_token_id=257, pad_token_id=257,
    )  # fmt: skip
    argv = _saved_with_corpus(transformers.Gemma4ForCausalLM(cfg), tmp_path, "native,yarn")
    capsys.readouterr()  # the save's progress bars
    code, captured = _cli(argv, tmp_path, monkeypatch, capsys)
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and "method 'yarn' computed" in lines[0] and "run --method native" in lines[0], captured.err
    assert "plan " not in captured.out and not (tmp_path / "results.csv").exists()
    code, captured = _cli([a if a != "native,yarn" else "native" for a in argv], tmp_path, monkeypatch, capsys)
    assert code in (0, None), captured.err
    assert "1 cell(s) run" in captured.out
