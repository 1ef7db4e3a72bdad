"""vLLM's NTK-mixed, fixed-NTK and NTK-alpha inverse frequencies, re-expressed for the tests.

Source: vllm-project/vllm (Apache-2.0, Copyright contributors to the vLLM project)
  * vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py,
    ``NTKScalingRotaryEmbedding._compute_inv_freq``, at commit 91b4f8fbfcc33a9cb58456f3061dced32509af4f
  * vllm/model_executor/layers/rotary_embedding/dynamic_ntk_alpha_rope.py,
    ``DynamicNTKAlphaRotaryEmbedding._compute_cos_sin_cache``, at commit a42938c2e7432785b64b436dd8b9905ad854cbb1
  * vllm/model_executor/layers/rotary_embedding/base.py, ``RotaryEmbeddingBase._compute_inv_freq``,
    at commit 072d10a084c2b89e63323c781eacd7d7e218ba2b
  * vllm/model_executor/layers/rotary_embedding/__init__.py, ``get_rope``: the keys it reads and its
    ``ntk`` branch, at commit 926c71f6f25f8fe0a71ba4b168205e64bef24a36

The same tensor operations, dtypes and order as those methods (torch, default dtype float32, on
CPU), written as free functions of (rotary_dim, base, ...) instead of module attributes; nothing
else of vLLM is needed. Apache-2.0 permits this use with attribution, given above.
"""

from __future__ import annotations

import torch


def base_inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    """``RotaryEmbeddingBase._compute_inv_freq``: ``1 / base ** (arange(0, d, 2, float) / d)``."""
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim
    return 1.0 / (base**exponents)


def ntk_scaling_inv_freq(rotary_dim: int, base: float, scaling_factor: float, mixed_b: float | None) -> torch.Tensor:
    """``NTKScalingRotaryEmbedding._compute_inv_freq`` (vLLM rope type ``ntk``).

    Without ``mixed_b`` (fixed NTK): base times the factor, then every frequency divided by
    ``factor ** (2 / d)``. With it (NTK-RoPE-mixed, kexue.fm/archives/9706): the base unchanged and
    pair ``m = 1..d/2`` divided by ``exp(a * m ** mixed_b)``, ``a = ln(factor) / (d/2) ** mixed_b``
    with ``ln`` of a float32 tensor of the factor.
    """
    inv_freq = base_inv_freq(rotary_dim, base * (scaling_factor if mixed_b is None else 1))
    if mixed_b is None:
        return inv_freq / scaling_factor ** (2 / rotary_dim)
    a = torch.tensor(scaling_factor).log() / (rotary_dim / 2) ** mixed_b
    lambda_1_m = (a * torch.arange(1, rotary_dim // 2 + 1).float() ** mixed_b).exp()
    return inv_freq / lambda_1_m


def ntk_alpha_inv_freq(rotary_dim: int, base: float, scaling_alpha: float) -> torch.Tensor:
    """``DynamicNTKAlphaRotaryEmbedding`` (vLLM rope type ``dynamic`` with ``alpha``, Hunyuan):
    the frequencies its cos/sin cache is built from, ``base * alpha ** (d / (d - 2))``."""
    new_base = base * scaling_alpha ** (rotary_dim / (rotary_dim - 2))
    return base_inv_freq(rotary_dim, new_base)


def get_rope_inv_freq(head_size: int, rope_parameters: dict) -> torch.Tensor:
    """The inverse frequencies of what ``get_rope(head_size, max_position, rope_parameters=...)``
    builds, for the rope types transcribed here (``ntk``): the keys as it reads them.

    ``base = rope_parameters.get("rope_theta", 10000)``, ``rope_type`` default ``"default"``,
    ``rotary_dim = int(head_size * rope_parameters.get("partial_rotary_factor", 1.0))`` (a factor
    outside (0, 1] is its ValueError); ``ntk``: ``NTKScalingRotaryEmbedding(head_size, rotary_dim,
    max_position, base, is_neox_style, rope_parameters["factor"], dtype, rope_parameters.get("mixed_b"))``.
    """
    base = rope_parameters.get("rope_theta", 10000)
    scaling_type = rope_parameters.get("rope_type", "default")
    partial_rotary_factor = rope_parameters.get("partial_rotary_factor", 1.0)
    if partial_rotary_factor <= 0.0 or partial_rotary_factor > 1.0:
        raise ValueError(f"{partial_rotary_factor=} must be between 0.0 and 1.0")
    rotary_dim = int(head_size * partial_rotary_factor)
    if scaling_type == "ntk":
        return ntk_scaling_inv_freq(rotary_dim, base, rope_parameters["factor"], rope_parameters.get("mixed_b"))
    raise ValueError(f"rope type {scaling_type} is not transcribed here")
