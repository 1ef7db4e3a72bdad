"""How long a plan takes: a FLOP count of the model's forwards against a throughput per device.

FLOPs of one forward of ``n`` tokens through a decoder of ``layers`` layers of width ``H``, with
``P`` weights in its layers and a vocabulary of ``V`` (multiply-add = 2 FLOPs; Kaplan et al.
2020, arXiv 2001.08361, sec. 2.1, with the causal attention term kept because it dominates at
long context):

    F(n) = 2 P n  +  2 layers H n^2  +  2 V H n
           (weights)  (QK^T and PV, causal: half of 4 layers H n^2)  (output head)

A forward of ``n`` new tokens after ``c`` cached ones (a suffix after a shared haystack) has the
attention term ``2 layers H ((c + n)^2 - c^2)``; a decoding step with ``c`` cached tokens costs
``2 P + 4 layers H c + 2 V H``.

The throughput is the model's achieved FLOP/s on a device, not the hardware peak, for forwards
and, separately, for decoding steps (latency-bound: 20 times fewer FLOP/s on a CPU): measured once
per (device, dtype, model) with a short calibration forward and a few steps of the loaded model on
its first run, and cached (see :func:`measured_rate`). Until then the default model on a CPU uses
:data:`DEFAULT_CPU` (the 2-core CPU ctxbench is developed on: 12 s for a 4k forward, about 100 s
at 16k; 46 ms a step at 1k of context); anything else gets tokens and FLOPs but no time. Loading
the model and tokenising are not counted.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

DEFAULT_CPU_RATE = 1.4e11  # FLOP/s the default model reaches in float32 on a 2-core CPU (fit above)
# Decoding one token at a time is bound by latency and by reading the KV cache, not by arithmetic:
# the default model on that CPU takes 46 ms a step at 1k of context and 85 ms at 8k, 7-10 GFLOP/s.
DEFAULT_CPU_DECODE_RATE = 8e9
RATE_VERSION = 2  # bump when the calibration changes: old cached rates are ignored
SIZE_VERSION = 1  # bump when reading a size from a config changes: old cached sizes are ignored


# Families whose MLP is two matrices (up, down) rather than three (gate, up, down).
NOT_GATED = ("gpt2", "gpt_neox", "gpt_neo", "gptj", "bloom", "opt", "falcon", "mpt", "codegen", "phi")


@dataclass(frozen=True)
class ModelSize:
    """What the FLOP count needs of a model: ``params`` are the weights of its layers (no
    embedding or head), ``hidden`` its width, ``vocab`` its output size."""

    name: str
    layers: int
    hidden: int
    params: float
    vocab: int
    source: str = "config"  # config | name (guessed from a size in the name) | assumed (the default model's)

    def forward_flops(self, n: int, head_tokens: int | None = None, cached: int = 0) -> float:
        """FLOPs of a forward of ``n`` tokens after ``cached`` tokens already in the KV cache; the
        output head on ``head_tokens`` of them (default all). The new tokens attend to the cache as
        well as to each other: causal attention over ``cached + n`` minus that over ``cached``."""
        head = n if head_tokens is None else head_tokens
        attention = 2 * self.layers * self.hidden * ((cached + n) ** 2 - cached**2)
        return 2 * self.params * n + attention + 2 * self.vocab * self.hidden * head

    def step_flops(self, context: int) -> float:
        """FLOPs of one decoding step with ``context`` cached tokens (one query, head on it)."""
        return 2 * self.params + 4 * self.layers * self.hidden * context + 2 * self.vocab * self.hidden

    @classmethod
    def from_config(cls, config, name: str = "") -> ModelSize:
        text = getattr(config, "text_config", None) or config
        get = lambda *keys, default=None: _first(text, keys, default)  # noqa: E731
        hidden = int(get("hidden_size", "n_embd", "d_model"))
        layers = int(get("num_hidden_layers", "n_layer", "num_layers"))
        gated = str(getattr(text, "model_type", "")) not in NOT_GATED  # gate, up and down projections

        def layer_params(c) -> float:
            look = lambda *keys, default=None: _first(c, keys, default)  # noqa: E731
            heads = int(look("num_attention_heads", "n_head"))
            head_dim = int(look("head_dim", default=hidden // heads))
            kv = int(look("num_key_value_heads", "multi_query_group_num", default=heads))
            inner = int(look("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden))
            attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2  # q, o; k, v
            return attention + (3 if gated else 2) * hidden * inner

        # a config whose layers differ (Gemma 4: a head dim per layer type) refuses its global
        # head_dim; its per-layer views say each layer's
        per_layer = getattr(text, "per_layer_config", None)
        params = sum(layer_params(c) for c in per_layer) if per_layer else layers * layer_params(text)
        return cls(name, layers, hidden, float(params), int(get("vocab_size", default=32000)))

    @classmethod
    def from_name(cls, name: str) -> ModelSize | None:
        """A size read from a hub id such as ``meta-llama/Llama-2-7b-hf`` (7e9 weights), with
        Llama's proportions (``12 layers H^2`` weights, ``H = 128 layers``): for plans when the
        config cannot be read (offline)."""
        m = re.search(r"(\d+(?:\.\d+)?)\s*([bm])\b", name.lower().replace("-", " ").replace("_", " "))
        if not m:
            return None
        params = float(m.group(1)) * (1e9 if m.group(2) == "b" else 1e6)
        hidden = int(round((params * 128 / 12) ** (1 / 3)))
        return cls(name, max(1, hidden // 128), hidden, params, 32000, source="name")


# SmolLM2-135M-Instruct: 30 layers of width 576 (9 heads of 64, 3 KV heads, MLP 1536), vocab 49152.
DEFAULT_SIZE = ModelSize("smollm2-135m", 30, 576, 30 * (576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536), 49152)


def assumed_size(name: str) -> ModelSize:
    """For a model whose size cannot be read: the default model's, saying so."""
    return replace(DEFAULT_SIZE, name=name, source="assumed")


def model_size(spec: str, trust_remote_code: bool = False) -> ModelSize:
    """The size of model ``spec`` from its config (cached per file like the geometry), else from a
    size in its name, else the default model's (``source`` says which)."""
    from .errors import UserError
    from .modelfiles import ALIASES, _cached, _file_key, hub_offline, load_config, locate

    if spec in ALIASES:  # every alias names the default model
        return DEFAULT_SIZE
    try:
        kind, path, gguf = locate(spec)
        if kind == "hub":
            if hub_offline():
                raise OSError("offline")  # no config to fetch: the name's size, without importing transformers
            return ModelSize.from_config(load_config(spec, trust_remote_code), spec)
        source = path / gguf if gguf else path / "config.json"
        fields = _cached("sizes.json", f"{SIZE_VERSION}|{_file_key(source)}",
                         lambda: asdict(ModelSize.from_config(load_config(spec, trust_remote_code), spec)))  # fmt: skip
        return ModelSize(**fields)
    except (UserError, OSError, ValueError, TypeError, AttributeError):
        return ModelSize.from_name(spec) or assumed_size(spec)


def plan_device(device: str) -> str:
    """The device type a run will use, without importing torch: ``auto`` is cuda where an NVIDIA
    driver is loaded, else cpu."""
    if device and device != "auto":
        return device.split(":")[0]
    return "cuda" if Path("/proc/driver/nvidia/version").exists() else "cpu"


def device_key(device: str, dtype: str) -> str:
    """Names a device for the rate cache: the CPU model and core count, or the GPU's model."""
    if device == "cpu":
        model = ""
        try:
            model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                          if line.startswith("model name")), "")  # fmt: skip
        except OSError:
            pass
        return f"cpu|{model or 'unknown'}|{os.cpu_count()}|{dtype}"
    names = sorted(p.read_text().split("Model:", 1)[-1].splitlines()[0].strip()
                   for p in Path("/proc/driver/nvidia/gpus").glob("*/information")) if device == "cuda" else []  # fmt: skip
    return f"{device}|{names[0] if names else 'unknown'}|{dtype}"


@dataclass(frozen=True)
class Throughput:
    """FLOP/s a model reaches on a device: ``prefill`` for forwards over many tokens, ``decode``
    for one-token decoding steps (far lower: each step is a chain of small kernels that reads the
    whole KV cache)."""

    prefill: float
    decode: float

    def seconds(self, forward_flops: float, decode_flops: float = 0.0) -> float:
        return forward_flops / self.prefill + decode_flops / self.decode

    @classmethod
    def from_entry(cls, entry) -> Throughput:
        """From its ``rates.json`` entry (``{"prefill": ..., "decode": ...}``)."""
        return cls(float(entry["prefill"]), float(entry["decode"]))


DEFAULT_CPU = Throughput(DEFAULT_CPU_RATE, DEFAULT_CPU_DECODE_RATE)


def cached_rate(device: str, dtype: str, model: str) -> Throughput | None:
    """The throughput ``model`` reached on this device and dtype before, if measured."""
    from .modelfiles import _cache_entries

    entry = _cache_entries("rates.json").get(f"{RATE_VERSION}|{device_key(device, dtype)}|{model}")
    try:
        return Throughput.from_entry(entry)
    except (TypeError, KeyError, ValueError):
        return None  # not measured, or written by another version


def rate_for_plan(device: str, dtype: str, model: str) -> tuple[Throughput | None, str, bool]:
    """(throughput, how it was obtained, whether it was measured here) for a plan of ``model``
    made before it loads."""
    dev = plan_device(device)
    dtype = dtype if dtype != "auto" else ("bfloat16" if dev == "cuda" else "float32")
    rate = cached_rate(dev, dtype, model)
    if rate:
        return rate, f"{dev} {dtype}, throughput measured on this machine", True
    from .modelfiles import ALIASES

    if dev == "cpu" and dtype == "float32" and model in ALIASES:
        return DEFAULT_CPU, "cpu float32, throughput of a 2-core CPU (not yet measured here)", False
    return None, f"{dev} {dtype}: throughput not measured yet (the first run on this device measures it)", False


def measured_rate(lm, tokens: int = 1024, steps: int = 8) -> Throughput:
    """The loaded model's throughput on its device and dtype: one timed forward of ``tokens``
    tokens after a warm-up forward of the same shape (the first call of a shape pays for kernel
    selection and page faults), then ``steps`` timed decoding steps on that forward's cache after
    one untimed step. Cached per (device, dtype, model): small models reach a smaller share of a
    device's peak than big ones, so the rate of one does not carry over to another. Measured on
    a busy machine it is low, and stays so: delete ``rates.json`` in the cache to redo it."""
    import time

    import torch

    from .modelfiles import _cached

    device = lm.torch_device.type
    key = f"{RATE_VERSION}|{device_key(device, lm.dtype)}|{lm.name}"

    def timed(call) -> tuple[float, object]:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = call()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    def measure() -> dict:
        from .decoding import cache_of, with_cache

        vocab = int(getattr(lm.model.config, "vocab_size", 0) or 2)
        ids = torch.randint(0, min(vocab, 1000), (1, tokens), device=lm.torch_device)
        size = ModelSize.from_config(lm.model.config, lm.name)
        with torch.inference_mode():
            lm.model(input_ids=ids, use_cache=False, logits_to_keep=1)  # warm-up, same shape
            seconds, out = timed(lambda: lm.model(input_ids=ids, use_cache=True, logits_to_keep=1))
            cache, token = cache_of(out), ids[:, -1:]
            lm.model(input_ids=token, **with_cache(lm.model, cache), use_cache=True, logits_to_keep=1)  # warm-up step
            step_seconds, _ = timed(lambda: [lm.model(input_ids=token, **with_cache(lm.model, cache), use_cache=True,
                                                      logits_to_keep=1) for _ in range(steps)])  # fmt: skip
        decode_flops = sum(size.step_flops(tokens + 1 + i) for i in range(steps))
        return {"prefill": size.forward_flops(tokens, head_tokens=1) / max(seconds, 1e-9),
                "decode": decode_flops / max(step_seconds, 1e-9)}  # fmt: skip

    return Throughput.from_entry(_cached("rates.json", key, measure))


def _first(config, keys, default=None):
    """The first of ``keys`` that ``config`` sets to something truthy (names differ by family)."""
    return next((getattr(config, k) for k in keys if getattr(config, k, None)), default)
