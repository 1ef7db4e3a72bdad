"""Plans: FLOP counts from the model's config, a throughput per device, measured once and cached."""

from __future__ import annotations

import pytest
from helpers import tiny_llama

from ctxbench.runner.costmodel import (
    DEFAULT_CPU,
    DEFAULT_CPU_RATE,
    DEFAULT_SIZE,
    ModelSize,
    Throughput,
    cached_rate,
    measured_rate,
    rate_for_plan,
)
from ctxbench.runner.grid import Job
from ctxbench.runner.plan import plan_table
from ctxbench.runner.settings import build_settings
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
    assert rate.prefill > 0 and rate.decode > 0 and cached_rate("cpu", "float32", tiny_lm.name) == rate
    assert rate_for_plan("cpu", "float32", tiny_lm.name) == (rate, "cpu float32, throughput measured on this machine", True)
    assert rate_for_plan("cpu", "float32", "smollm2-135m")[0] == DEFAULT_CPU  # another model: not its rate
    plan = plan_table([_job()], tiny_lm.name, device="cpu", dtype="float32", size=DEFAULT_SIZE)
    assert plan.seconds == pytest.approx(plan.flops / rate.prefill)  # perplexity: forwards only


def test_a_suffix_after_a_cache_costs_what_the_whole_forward_costs_beyond_the_prefix():
    size = DEFAULT_SIZE
    for prefix, suffix in ((0, 4096), (4096, 4096), (12288, 4096), (100, 1)):
        beyond = size.forward_flops(prefix + suffix, head_tokens=0) - size.forward_flops(prefix, head_tokens=0)
        assert size.forward_flops(suffix, head_tokens=0, cached=prefix) == pytest.approx(beyond)
    # a decoding step is a one-token suffix with the head on it
    assert size.step_flops(8192) == pytest.approx(size.forward_flops(1, head_tokens=1, cached=8192), rel=1e-3)


def _niah(depths: str):
    task = get("niah")
    return Job(task, build_settings(task, "none", 2.0, "16k", {"variants": "single_1", "depths": depths, "trials": "2", "protocol": "exact"}))


def test_a_retrieval_plan_counts_each_suffix_attending_to_the_haystack_before_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    n, size = 16384, DEFAULT_SIZE
    job = plan_table([_niah("0.5")], "smollm2-135m", size=size).jobs[0]
    # reference: the shared half once, then each trial's second half after it, then 128 steps each at 16k
    forward = size.forward_flops(n // 2) + 2 * size.forward_flops(n // 2, cached=n // 2)
    decode = 2 * 128 * size.step_flops(n)
    assert job.flops == pytest.approx(forward + decode) and job.decode_flops == pytest.approx(decode)
    assert job.seconds == pytest.approx(forward / DEFAULT_CPU.prefill + decode / DEFAULT_CPU.decode)


def test_decoding_steps_take_the_decoding_throughput():
    rate = Throughput(prefill=1e11, decode=1e9)
    assert rate.seconds(2e11, 3e9) == pytest.approx(2 + 3)


def _ppl(methods: str, corpus_dir) -> Job:
    task = get("ppl")
    return Job(task, build_settings(task, methods, 2.0, "128,256", {"dataset": str(corpus_dir), "docs": "1"}))


def test_a_resumed_run_plans_only_the_cells_the_results_file_does_not_hold(tiny_lm, corpus_dir, tmp_path, monkeypatch):
    """A run of none,yarn, then none,yarn,ntk to the same file: the second plan counts ntk's cells
    alone (the tokens of a plan of ntk by itself) and says that 4 more are already there."""
    import io

    from rich.console import Console

    from ctxbench.runner.grid import execute

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    out = tmp_path / "r.csv"
    execute([_ppl("none,yarn", corpus_dir)], tiny_lm, out)
    shown = io.StringIO()
    execute([_ppl("none,yarn,ntk", corpus_dir)], tiny_lm, out, console=Console(file=shown, width=400))
    alone = plan_table([_ppl("ntk", corpus_dir)], tiny_lm.name, size=DEFAULT_SIZE).jobs[0]
    line = next(x for x in shown.getvalue().splitlines() if x.startswith("plan ppl"))
    expected = f"plan ppl: 2 cell(s) (4 more already in the results file: skipped, not counted), {alone.forwards} forward(s), "
    assert line.startswith(expected + f"{alone.tokens:,} tokens through the model"), line


def test_a_partial_plan_narrows_each_method_to_its_own_lengths_and_counts_shared_work_once(corpus_dir):
    """ppl with --metrics kl, none at 128 and yarn at 256 left of four cells: none's item costs a
    128-token forward, yarn's a 256-token one, and the unscaled references are one item."""
    from ctxbench.runner.plan import Todo, pending_items
    from ctxbench.tasks.base import Cell

    task = get("ppl")
    job = Job(task, build_settings(task, "none,yarn", 2.0, "128,256", {"dataset": str(corpus_dir), "docs": "1", "metrics": "kl"}))
    none, yarn = job.settings.methods
    grid = tuple(Cell("ppl", m, f, n) for m, f in ((none, None), (yarn, 2.0)) for n in (128, 256))
    items = pending_items(job, Todo(grid, (Cell("ppl", none, None, 128), Cell("ppl", yarn, 2.0, 256))), 8192)
    by = {i.what: i for i in items}
    assert by["none"].forwards == (128,) and by["yarn x2"].forwards == (256,)
    assert [w for w in by if w.startswith("unscaled references")] == ["unscaled references (kl)"] and len(items) == 3
