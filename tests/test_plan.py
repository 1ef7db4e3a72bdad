"""Plans: FLOP counts from the model's config, a throughput per device, measured once and cached."""

from __future__ import annotations

import pytest
from conftest import tiny_llama

from ctxbench.costmodel import (
    DEFAULT_CPU_RATE,
    DEFAULT_SIZE,
    ModelSize,
    cached_rate,
    measured_rate,
    rate_for_plan,
)
from ctxbench.plan import plan_table
from ctxbench.runner import Job
from ctxbench.settings import build_settings
from ctxbench.tasks import get


def _layer_weights(model) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if ".layers." in name and p.dim() == 2)


def test_weights_counted_from_the_config_are_the_models_own():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    llama = tiny_llama()
    assert ModelSize.from_config(llama.config).params == _layer_weights(llama)  # gated MLP, grouped KV heads
    neox = GPTNeoXForCausalLM(GPTNeoXConfig(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=100))
    assert ModelSize.from_config(neox.config).params == _layer_weights(neox)  # two-matrix MLP


def test_default_model_at_the_default_rate_gives_the_times_measured_on_a_2_core_cpu():
    # measured on the development machine: 12 s for a 4k forward, about 100 s for 16k
    assert DEFAULT_SIZE.forward_flops(4096) / DEFAULT_CPU_RATE == pytest.approx(12, rel=0.1)
    assert DEFAULT_SIZE.forward_flops(16384) / DEFAULT_CPU_RATE == pytest.approx(100, rel=0.1)


def test_a_size_in_a_hub_id_gives_llama_proportions():
    size = ModelSize.from_name("meta-llama/Llama-2-7b-hf")
    assert size.params == 7e9 and size.source == "name"
    assert 4000 < size.hidden < 4400 and 30 <= size.layers <= 34  # Llama-2-7B: 4096 wide, 32 layers


def _job():
    return Job(get("ppl"), build_settings(get("ppl"), "none", 2.0, "1k,2k", {"docs": 1}))


def test_a_device_without_a_measured_throughput_gets_tokens_and_flops_but_no_time(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    plan = plan_table([_job()], "smollm2-135m", device="cuda", dtype="bfloat16")
    assert not plan.timed and plan.flops == pytest.approx(DEFAULT_SIZE.forward_flops(2048))
    assert "not measured" in plan.basis


def test_a_measured_throughput_is_cached_and_used_by_the_next_plans(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    assert cached_rate("cpu", "float32", tiny_lm.name) is None
    rate = measured_rate(tiny_lm)
    assert rate > 0 and cached_rate("cpu", "float32", tiny_lm.name) == rate
    assert rate_for_plan("cpu", "float32", tiny_lm.name) == (rate, "cpu float32, throughput measured on this machine", True)
    assert rate_for_plan("cpu", "float32", "smollm2-135m")[0] == DEFAULT_CPU_RATE  # another model: not its rate
    plan = plan_table([_job()], tiny_lm.name, device="cpu", dtype="float32", size=DEFAULT_SIZE)
    assert plan.seconds == pytest.approx(plan.flops / rate)
