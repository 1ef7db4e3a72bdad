"""bf16 and fp16 against fp32, on CPU: what a GPU user gets with the default ``--dtype auto``.

Tolerances and why: bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%) in every
weight, activation and attention probability, so a model's logits move by a few percent of
their spread, whatever ctxbench does; the tests bound that. What ctxbench itself must not add:
the loss reduces in fp32 (log-softmax and sums), rotary angles are computed in fp32 or better,
and the two-branch kernels merge their partial softmaxes in fp32.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_llama

from ctxbench.methods import resolve
from ctxbench.methods.patching import applied
from ctxbench.model.decoding import extend
from ctxbench.model.geometry import RopeGeometry
from ctxbench.model.scoring import token_nll

N = 384  # past the tiny model's trained 256: the methods are doing something
LOW = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _pair(dtype):
    full = tiny_llama()
    low = copy.deepcopy(full).to(LOW[dtype])
    return full, low


def _geometry(model):
    return RopeGeometry.from_config(model.config)


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(1)
    return torch.randint(0, 256, (N,))


@pytest.mark.parametrize("dtype", list(LOW))
def test_low_precision_loss_reduces_in_fp32_and_stays_within_half_a_percent(dtype, ids):
    full, low = _pair(dtype)
    want, got = token_nll(full, ids), token_nll(low, ids)
    assert got.dtype == torch.float32
    with torch.no_grad():  # the same low-precision logits, reduced in float64: ctxbench adds no rounding of its own
        logits = low(ids[None]).logits[0, :-1].double()
    exact = torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none")
    assert torch.allclose(got.double(), exact, atol=1e-5, rtol=1e-5)
    # per token: the logits' own rounding; the mean: errors average out
    assert (got - want).abs().max() < 0.05
    assert abs(got.double().mean() - want.double().mean()) / want.double().mean() < 5e-3


@pytest.mark.parametrize("dtype", list(LOW))
@pytest.mark.parametrize("spec,params", [("yarn", {}), ("ntk+logn", {}), ("rerope", {"window": 32}),
                                         ("leaky-rerope", {"window": 32, "k": 2.0}), ("self-extend", {"window": 32, "group": 4}),
                                         ("rerope+logn", {"window": 32})])  # fmt: skip
def test_methods_in_low_precision_match_fp32_within_the_rounding_of_the_format(dtype, spec, params, ids):
    full, low = _pair(dtype)
    setting = resolve(spec, params)
    with applied(full, _geometry(full), setting, 2.0, N):
        want = token_nll(full, ids)
    with applied(low, _geometry(low), setting, 2.0, N):
        got = token_nll(low, ids)
    assert abs(got.double().mean() - want.double().mean()) / want.double().mean() < 5e-3
    assert (got - want).abs().max() < 0.05


@pytest.mark.parametrize("spec", ["yarn", "rerope"])
def test_decoding_after_a_shared_prefix_cache_in_bf16_matches_fp32_within_the_format(spec):
    """What passkey and RULER decoding do: a prefix cache extended by a suffix, then greedy steps.
    Greedy tokens themselves may differ where a tiny random model's top two logits are closer than
    bf16's rounding, so the logits of each step are compared (fed the fp32 run's tokens)."""
    full, low = _pair("bfloat16")
    torch.manual_seed(2)
    prompt = torch.randint(0, 256, (330,)).tolist()
    setting = resolve(spec, {"window": 32} if spec == "rerope" else {})
    steps = {}
    for name, model in (("fp32", full), ("bf16", low)):
        with applied(model, _geometry(model), setting, 2.0, 345), torch.no_grad():
            cache = extend(model, prompt[:200])
            cache = extend(model, prompt[200:-1], copy.deepcopy(cache))
            token, logits = prompt[-1], []
            for t in range(12):
                out = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
                logits.append(out.logits[0, -1].float())
                token = steps["fp32"][t].argmax().item() if name == "bf16" else logits[-1].argmax().item()
        steps[name] = logits
    for want, got in zip(steps["fp32"], steps["bf16"], strict=True):
        assert (got - want).abs().max() <= 0.03 * (want.max() - want.min())
