"""Tiny random-weight checkpoints of the architectures users deploy, each carrying its real model's
RoPE settings (base, scaling type and parameters, partial rotary, per-layer-type bases, trained
length) with the shapes shrunk: hidden 128, 3 layers (ms-poe's default first layer is 2), 4 query heads on 2 key/value heads, head dim
32 (the smallest vLLM's CPU attention runs), the byte tokenizer's 258 tokens, float32. Saved to a folder, each loads in transformers and in
vLLM (``LLM(model=folder)``); built in-process, nothing downloaded.

``scripts/architectures.py`` runs every method on each of them on both backends and writes
``results/architectures.csv``; ``tests/backends/test_architectures.py`` checks the two backends
agree on them. The RoPE settings are the shipped ``config.json`` values of:

- llama-3.1: meta-llama/Llama-3.1-8B (``llama3``: factor 8, low 1, high 4, original 8192, base 500k);
- qwen2.5: Qwen/Qwen2.5-7B-Instruct (Qwen2 architecture, base 1e6, 32k);
- qwen3: Qwen/Qwen3-8B (qk-norm, base 1e6, 40k);
- phi-3.5: microsoft/Phi-3.5-mini-instruct (LongRoPE: short and long factor lists of d/2, original 4096, 128k);
- gemma-3: google/gemma-3-4b-it's text model (sliding layers base 10k, full-attention layers base 1M
  with ``linear`` x8, ``layer_types``; ``query_pre_attn_scalar`` = head dim as in the 1B/4B/12B models);
- gpt-neox: EleutherAI/pythia (partial rotary, ``rotary_pct`` 0.25, base 10k, 2048);
- mistral: mistralai/Mistral-7B-Instruct-v0.3 (base 1e6, 32k, no sliding window);
- olmo-2: allenai/OLMo-2-1124-7B (base 500k, 4096).
"""

from __future__ import annotations

from pathlib import Path

import torch

HEAD_DIM = 32  # the smallest head vLLM's CPU attention runs (16 is refused: 'Unsupported CPU attention configuration')
SHAPE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=258, bos_token_id=256, eos_token_id=257, pad_token_id=257, initializer_range=0.1,
             tie_word_embeddings=False)  # fmt: skip

# Phi-3.5-mini's factors are 48 per list (head dim 96); these keep their shape (short ~1 rising to ~1.3, long
# rising from ~1 to ~50) over d/2 = 16.
PHI_SHORT = [1.0] * 6 + [1.01, 1.02, 1.04, 1.06, 1.09, 1.12, 1.16, 1.2, 1.25, 1.3]
PHI_LONG = [1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.8, 2.5, 3.6, 5.5, 8.5, 13.0, 19.0, 27.0, 37.0, 47.8]

# name -> (transformers config class, fields over SHAPE); the order is the docs table's
ARCHITECTURES: dict[str, tuple[str, dict]] = {
    "llama-3.1": ("LlamaConfig", dict(max_position_embeddings=131072, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192})),
    "qwen2.5": ("Qwen2Config", dict(max_position_embeddings=32768, use_sliding_window=False,
                                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3": ("Qwen3Config", dict(head_dim=HEAD_DIM, max_position_embeddings=40960, use_sliding_window=False,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "phi-3.5": ("Phi3Config", dict(max_position_embeddings=131072, original_max_position_embeddings=4096, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
        "short_factor": PHI_SHORT, "long_factor": PHI_LONG})),
    "gemma-3": ("Gemma3TextConfig", dict(head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM, max_position_embeddings=131072,
                                         sliding_window=128, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                         rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                          "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}})),
    "gpt-neox": ("GPTNeoXConfig", dict(max_position_embeddings=2048, rotary_pct=0.25, use_parallel_residual=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})),
    "mistral": ("MistralConfig", dict(max_position_embeddings=32768, sliding_window=None,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "olmo-2": ("Olmo2Config", dict(max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
}  # fmt: skip


def config_of(name: str):
    """The transformers config of architecture ``name`` (tiny shapes, its real RoPE settings)."""
    import transformers

    cls, fields = ARCHITECTURES[name]
    shape = dict(SHAPE)
    if cls == "GPTNeoXConfig":  # GPT-NeoX has one key/value head per query head and no separate bos/pad fields of that name
        shape.pop("num_key_value_heads")
    config = getattr(transformers, cls)(**{**shape, **fields})
    config.dtype = torch.float32
    return config


def random_model(name: str, seed: int = 0):
    """Architecture ``name`` as a transformers model with random weights (``seed``), float32."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config_of(name), dtype=torch.float32).eval()


def build(name: str, path, seed: int = 0) -> Path:
    """Architecture ``name`` with random weights (``seed``) and the byte tokenizer, saved to ``path``."""
    from helpers import save_with_tokenizer

    model = random_model(name, seed)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_with_tokenizer(model, path)
    return path


# ---- every method on each architecture, on each backend: what results/architectures.csv holds ----

BACKENDS = ("hf", "vllm")
FACTOR = 2.0
LENGTHS = (512, 1024)
# a method that needs a value with no default gets this one (theta: a new base of 2e6)
# (ntk-mixed: b = 0.625; ntk-alpha: alpha 4; proportional: Gemma 4's 0.25)
PARAMS = {"theta": {"theta": 2e6}, "ntk-mixed": {"mixed_b": 0.625}, "ntk-alpha": {"scaling_alpha": 4.0},
          "proportional": {"partial_rotary_factor": 0.25}}  # fmt: skip
COLUMNS = ("architecture", "model_type", "backend", "method", "status", "reason", "ppl_rel_diff", "answer_nll_rel_diff",
           "factor", "lengths", "vllm", "transformers", "torch", "date")  # fmt: skip


def methods() -> tuple[str, ...]:
    """Every method ctxbench has (the registry's names), in its order."""
    from ctxbench.methods import METHODS

    return tuple(METHODS)


def setting_of(method: str):
    from ctxbench.methods import resolve

    return resolve(method, PARAMS.get(method))


def geometry_of(name: str):
    from ctxbench.model.geometry import RopeGeometry

    return RopeGeometry.from_config(config_of(name))


def refusal(backend: str, name: str, method: str, model=None) -> str | None:
    """Why ``backend`` refuses ``method`` on architecture ``name`` before the plan (the checks a run
    makes: the method on this geometry at :data:`FACTOR` and :data:`LENGTHS`, its frequencies against
    the model's rotary tables, and what the backend cannot run), or None. ``model``: the transformers
    model, whose rotary tables the ``hf`` backend checks (built from the config when not given)."""
    from ctxbench.backends import vllm
    from ctxbench.errors import UserError
    from ctxbench.methods import check_applicable, check_derived
    from ctxbench.methods.export import vllm_settings
    from ctxbench.methods.patching import check_layout

    setting, geom = setting_of(method), geometry_of(name)
    factor = FACTOR if setting.uses_factor else None
    try:
        check_applicable(setting, geom)
        if backend == "vllm":
            reason = vllm.refusal(setting)
            if reason is not None:
                return f"vLLM cannot run method '{setting.label}': {reason}"
            vllm_settings(setting, geom, FACTOR)  # what vllm.check_cells asks of each cell
            vllm.check_model_method(setting, geom, FACTOR)
        layers = SHAPE["num_hidden_layers"] if setting.attention is not None and setting.attention.layers is not None else None
        check_derived(setting, geom, factor, list(LENGTHS), layers)
        if backend == "hf":
            check_layout(model if model is not None else random_model(name), geom, setting, FACTOR)
    except UserError as err:
        return err.what
    return None
