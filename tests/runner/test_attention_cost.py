"""Plans price an attention-level method's attention by its path's measured cost factor
(``ctxbench.runner.costmodel``): the path is read from the registry entry's fields, the factor is
measured once per device, dtype, model and path, and the plan says which factor it applied."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from helpers import byte_tokenizer, tiny_llama
from rich.console import Console

from ctxbench.backends.hf import wrap
from ctxbench.methods.registry import METHODS
from ctxbench.methods.setting import resolve
from ctxbench.model.autodtype import device_key
from ctxbench.model.size import DEFAULT_SIZE, Flops
from ctxbench.runner.costmodel import (
    DEFAULT_CPU,
    PATH_FACTORS,
    attention_factor,
    factors_for_plan,
    measured_factor,
)
from ctxbench.runner.grid import Job
from ctxbench.runner.plan import plan_table, print_plan
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import get

MODEL = "smollm2-135m"  # planned at the default 2-core CPU rate until measured


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))


def _seed(path: str, factor: float, method: str = "self-extend") -> None:
    PATH_FACTORS.lookup(f"{device_key('cpu', 'float32')}|{MODEL}|{path}", lambda: {"factor": factor, "length": 4096, "method": method})


def _ppl(methods: str, lengths: str = "4k") -> Job:
    task = get("ppl")
    return Job(task, build_settings(task, methods, "2", lengths, {"docs": "1"}))


def _plan(job: Job):
    return plan_table([job], MODEL, 8192, device="cpu", dtype="float32", size=DEFAULT_SIZE)


def _expected_seconds(n: int, factor: float) -> float:
    """A ppl cell of one document at ``n`` tokens: one forward, its attention at ``factor`` x plain."""
    work = DEFAULT_SIZE.forward_parts(n)
    return work.linear / DEFAULT_CPU.linear + factor * work.attention / DEFAULT_CPU.attention


def test_the_attention_path_is_read_from_the_entrys_fields():
    for name, m in METHODS.items():
        kinds = set(m.attention_path.split("+")) - {""}
        assert bool(kinds) == m.attention, name
        assert ("far" in kinds) == (m.attention and m.far is not None), name
        assert ("branches" in kinds) == (m.attention and m.branches is not None), name
        assert ("heads" in kinds) == (m.attention and m.head_ratios is not None), name
        assert ("query-scale" in kinds) == (m.attention and m.query_scale is not None), name


def test_a_renamed_entry_keeps_its_path():
    """No name switch: an entry under another name costs what its fields say."""
    assert replace(METHODS["self-extend"], name="my-extend").attention_path == "far"


def test_a_stacked_method_takes_the_paths_of_its_parts():
    assert resolve("rerope+logn").attention_path == "far+query-scale"
    assert resolve("ntk").attention_path == "" and resolve("none").attention_path == ""


def test_the_plan_prices_a_measured_path_at_its_factor_and_plain_methods_at_one():
    _seed("far", 2.0)
    rows = {what.split(" x")[0]: seconds for what, _, _, seconds in _plan(_ppl("none,self-extend")).jobs[0].rows}
    assert rows["none"] == pytest.approx(_expected_seconds(4096, 1.0), rel=1e-12)
    assert rows["self-extend"] == pytest.approx(_expected_seconds(4096, 2.0), rel=1e-12)


def test_a_path_not_measured_yet_is_priced_as_plain():
    rows = {what.split(" x")[0]: seconds for what, _, _, seconds in _plan(_ppl("self-extend")).jobs[0].rows}
    assert rows["self-extend"] == pytest.approx(_expected_seconds(4096, 1.0), rel=1e-12)


def test_each_path_takes_its_own_factor():
    _seed("far", 2.0)
    _seed("branches", 3.0, "dca")
    plan = _plan(_ppl("self-extend,dca,logn"))
    rows = {what.split(" x")[0]: seconds for what, _, _, seconds in plan.jobs[0].rows}
    assert rows["dca"] == pytest.approx(_expected_seconds(4096, 3.0), rel=1e-12)
    assert rows["logn"] == pytest.approx(_expected_seconds(4096, 1.0), rel=1e-12)
    assert set(plan.paths) == {("far", 2.0, ("self-extend",)), ("branches", 3.0, ("dca",)), ("query-scale", None, ("logn",))}


def test_the_plan_line_says_which_factor_it_applied():
    _seed("far", 1.37)
    out = io.StringIO()
    print_plan(Console(file=out, width=400), _plan(_ppl("none,self-extend,dca")))
    lines = out.getvalue().splitlines()
    assert "attention of self-extend (far path) priced at 1.37x a plain forward's (measured on this machine)" in lines
    assert any(line.startswith("attention of dca (branches path) priced as a plain forward's (its cost factor is not measured yet")
               for line in lines)  # fmt: skip
    assert not any("attention of none" in line for line in lines)


def test_a_plan_of_plain_methods_says_nothing_of_attention_paths():
    out = io.StringIO()
    print_plan(Console(file=out, width=400), _plan(_ppl("none,yarn")))
    assert "attention of" not in out.getvalue()


def test_the_factor_is_the_extra_time_per_second_of_plain_attention():
    work = Flops(linear=3e11, attention=1e11)
    rate = replace(DEFAULT_CPU, linear=1e11, attention=5e10)  # plain: 3 s linear + 2 s attention
    # the plain forward took 10 s (twice the rates' 5 s), so its attention took 4 s; the method 12 s: 2 s more
    assert attention_factor(12.0, 10.0, work, rate) == pytest.approx(1 + 2.0 / 4.0)
    assert attention_factor(10.0, 10.0, work, rate) == pytest.approx(1.0)
    assert attention_factor(0.1, 10.0, work, rate) == 0.05  # noise below the floor: the floor


def test_a_measured_factor_is_cached_per_path_with_the_method_that_measured_it():
    lm = wrap(tiny_llama(), byte_tokenizer(), name=MODEL)
    factor = measured_factor(lm, resolve("self-extend"), 2.0, DEFAULT_CPU, length=64)
    assert 0.05 <= factor <= 100
    assert factors_for_plan("cpu", "float32", MODEL, ["far", "branches"]) == {"far": factor}
    entry = PATH_FACTORS.get(f"{device_key('cpu', 'float32')}|{MODEL}|far")
    assert entry == {"factor": factor, "length": 64, "method": "self-extend"}
    # another two-branch method takes the cached factor: no second measurement
    assert measured_factor(lm, resolve("rerope"), 2.0, DEFAULT_CPU, length=64) == factor
