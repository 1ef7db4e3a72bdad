"""Plans: FLOP counts from the model's config, a throughput per device, measured once and cached."""

from __future__ import annotations

import pytest
from helpers import tiny_llama

from ctxbench.model.size import DEFAULT_SIZE, Flops, ModelSize
from ctxbench.runner.costmodel import DEFAULT_CPU, Throughput, cached_rate, fit, measured_rate, rate_for_plan
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
    assert DEFAULT_CPU.seconds(DEFAULT_SIZE.forward_parts(4096)) == pytest.approx(12, rel=0.1)
    assert DEFAULT_CPU.seconds(DEFAULT_SIZE.forward_parts(16384)) == pytest.approx(100, rel=0.1)
    # the two it was fitted from (no head past the last token, as bench_forward runs them)
    assert DEFAULT_CPU.seconds(DEFAULT_SIZE.forward_parts(1024, head_tokens=1)) == pytest.approx(1.64, rel=0.01)
    assert DEFAULT_CPU.seconds(DEFAULT_SIZE.forward_parts(4096, head_tokens=1)) == pytest.approx(10.39, rel=0.01)
    assert DEFAULT_CPU.seconds(DEFAULT_SIZE.step_parts(1024)) == pytest.approx(0.046, rel=0.01)
    assert DEFAULT_CPU.seconds(DEFAULT_SIZE.step_parts(8192)) == pytest.approx(0.085, rel=0.01)


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
    assert min(rate.entry().values()) > 0 and cached_rate("cpu", "float32", tiny_lm.name) == rate
    assert rate_for_plan("cpu", "float32", tiny_lm.name) == (rate, "cpu float32, throughput measured on this machine", True)
    assert rate_for_plan("cpu", "float32", "smollm2-135m")[0] == DEFAULT_CPU  # another model: not its rate
    plan = plan_table([_job()], tiny_lm.name, device="cpu", dtype="float32", size=DEFAULT_SIZE)
    work = plan.jobs[0].work
    assert work.decode == 0 and work.attention > 0  # perplexity: forwards only
    assert plan.seconds == pytest.approx(work.linear / rate.linear + work.attention / rate.attention)


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
    parts = (size.forward_parts(n // 2) + 2 * size.forward_parts(n // 2, cached=n // 2) + 2 * 128 * size.step_parts(n))
    assert job.work == pytest.approx(parts) and job.seconds == pytest.approx(DEFAULT_CPU.seconds(parts))


def test_each_part_of_the_work_takes_its_own_throughput():
    rate = Throughput(linear=1e11, attention=5e10, decode_linear=1e9, decode_attention=2e9)
    assert rate.seconds(Flops(2e11, 1e11, 3e9, 4e9)) == pytest.approx(2 + 2 + 3 + 2)


def _points(a: float, b: float, contexts, parts) -> list[tuple[float, float, float]]:
    """What a device that spends ``a`` s per linear FLOP and ``b`` s per attention FLOP measures."""
    return [(lin, att, a * lin + b * att) for lin, att in (parts(n) for n in contexts)]


def test_two_measurements_give_back_the_linear_and_attention_rates_they_were_made_with():
    forward = lambda n: (lambda f: (f.linear, f.attention))(DEFAULT_SIZE.forward_parts(n, head_tokens=1))  # noqa: E731
    step = lambda c: (lambda f: (f.decode_linear, f.decode_attention))(DEFAULT_SIZE.step_parts(c))  # noqa: E731
    for a, b in ((1 / 1.6e11, 1 / 1.1e11), (1 / 4e14, 1 / 9e14), (1 / 2e9, 1 / 3e10)):
        for parts, sizes in ((forward, (1024, 4096)), (step, (1024, 4096)), (forward, (512, 1024, 8192))):
            linear, attention, apart = fit(_points(a, b, sizes, parts))
            assert apart and linear == pytest.approx(1 / a, rel=1e-9) and attention == pytest.approx(1 / b, rel=1e-9)


def test_measurements_no_two_positive_rates_fit_get_one_rate_for_every_flop():
    """Noise on a busy machine: the 4k forward no slower than its linear part allows, or the 1k one
    slower than the 4k one. Not a negative or infinite rate: one rate over both (positive)."""
    f1, f4 = DEFAULT_SIZE.forward_parts(1024, head_tokens=1), DEFAULT_SIZE.forward_parts(4096, head_tokens=1)
    for t1, t4 in ((1.0, 3.0), (2.0, 1.0)):
        linear, attention, apart = fit([(f1.linear, f1.attention, t1), (f4.linear, f4.attention, t4)])
        assert not apart and linear == attention == pytest.approx((f1.total + f4.total) / (t1 + t4))


def _ppl_at(length: str) -> Job:
    return Job(get("ppl"), build_settings(get("ppl"), "none", 2.0, length, {"docs": 1}))


def test_a_plan_at_long_context_grows_with_the_square_of_the_length(tmp_path, monkeypatch):
    """Doubling 64k to 128k costs 4x less the linear share, not 2x: attention's square is priced."""
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    seconds = {n: plan_table([_ppl_at(n)], "smollm2-135m", device="cpu", dtype="float32").seconds for n in ("64k", "128k")}
    assert seconds["128k"] / seconds["64k"] > 3.5
    work = plan_table([_ppl_at("128k")], "smollm2-135m", device="cpu", dtype="float32").jobs[0].work
    assert seconds["128k"] == pytest.approx(work.linear / DEFAULT_CPU.linear + work.attention / DEFAULT_CPU.attention)


def test_the_calibration_times_forwards_and_steps_at_two_lengths(tiny_lm, tmp_path, monkeypatch):
    """measured_rate fits a forward at 1k and one at 4k, and decoding steps on each one's cache."""
    import ctxbench.runner.costmodel as costmodel

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    seen = []
    monkeypatch.setattr(costmodel, "fit", lambda points: seen.append(list(points)) or (3e9, 2e9, True))
    rate = measured_rate(tiny_lm, steps=2)
    assert rate == Throughput(3e9, 2e9, 3e9, 2e9)
    size = ModelSize.from_config(tiny_lm.model.config)
    forwards, steps = seen
    assert [p[:2] for p in forwards] == [(f.linear, f.attention) for f in (size.forward_parts(n, head_tokens=1) for n in (1024, 4096))]
    assert [p[:2] for p in steps] == [(f.decode_linear, f.decode_attention) for f in
                                      (size.step_parts(n + 1) + size.step_parts(n + 2) for n in (1024, 4096))]  # fmt: skip
    assert all(p[2] > 0 for p in forwards + steps)


def test_a_rate_of_the_old_single_length_form_is_measured_again(tiny_lm, tmp_path, monkeypatch, capsys):
    """rates.json of version 3 (one forward rate and one decoding rate from one 1024-token forward):
    a plan falls back as if never measured, with one note, and the next run measures and stores
    the two-length form (version 4)."""
    import json

    from ctxbench.model.autodtype import device_key
    from ctxbench.model.cache import digest
    from ctxbench.runner.costmodel import RATES

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    old = {"prefill": 3.7e10, "decode": 1.0e9}
    entry = {"value": old, "sha256": digest(json.dumps(old, sort_keys=True, separators=(",", ":")).encode())}
    key = f"{device_key('cpu', 'float32')}|{tiny_lm.name}"
    RATES.path.parent.mkdir(parents=True, exist_ok=True)
    RATES.path.write_text(json.dumps({"schema": "throughputs", "version": 3, "entries": {key: entry}}))
    assert rate_for_plan("cpu", "float32", tiny_lm.name)[1:] == ("cpu float32: throughput not measured yet (the first run on this device measures it)", False)
    assert "version 3 of throughputs, this ctxbench reads version 4" in capsys.readouterr().err
    rate = measured_rate(tiny_lm)
    assert json.loads(RATES.path.read_text())["version"] == 4 and cached_rate("cpu", "float32", tiny_lm.name) == rate


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
