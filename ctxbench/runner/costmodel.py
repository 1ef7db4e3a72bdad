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
from dataclasses import dataclass
from pathlib import Path

from ctxbench.model.cache import BadEntry, JsonCache, Schema, positive_number
from ctxbench.model.files import ALIASES
from ctxbench.model.size import DEFAULT_SIZE, ModelSize, assumed_size, model_size, size_of  # noqa: F401  (also imported from here)

DEFAULT_CPU_RATE = 1.4e11  # FLOP/s the default model reaches in float32 on a 2-core CPU (fit above)
# Decoding one token at a time is bound by latency and by reading the KV cache, not by arithmetic:
# the default model on that CPU takes 46 ms a step at 1k of context and 85 ms at 8k, 7-10 GFLOP/s.
DEFAULT_CPU_DECODE_RATE = 8e9


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
        """From its ``rates.json`` entry (``{"prefill": ..., "decode": ...}``), checked by
        :func:`_is_rate` on the way in."""
        return cls(float(entry["prefill"]), float(entry["decode"]))


DEFAULT_CPU = Throughput(DEFAULT_CPU_RATE, DEFAULT_CPU_DECODE_RATE)


def _is_rate(value: object) -> None:
    """A throughput a plan can divide by: exactly ``prefill`` and ``decode``, each a finite FLOP/s
    > 0 (a zero divided every plan by zero, a NaN made its time NaN)."""
    if not isinstance(value, dict) or set(value) != {"prefill", "decode"}:
        raise BadEntry(f"{type(value).__name__} {str(value)[:60]}, not {{prefill, decode}}")
    for name in ("prefill", "decode"):
        positive_number(value[name], f"{name} rate")


# Keyed by device, dtype and model. Bump the version when the calibration changes: older rates are
# then measured again.
RATES = JsonCache("rates.json", Schema("throughputs", 3), _is_rate, then="measured again on the next run")


def cached_rate(device: str, dtype: str, model: str) -> Throughput | None:
    """The throughput ``model`` reached on this device and dtype before, if measured (and if its
    entry verifies: a bad one is noted and dropped, and the plan falls back as if never measured)."""
    entry = RATES.get(f"{device_key(device, dtype)}|{model}")
    return None if entry is None else Throughput.from_entry(entry)


def rate_for_plan(device: str, dtype: str, model: str) -> tuple[Throughput | None, str, bool]:
    """(throughput, how it was obtained, whether it was measured here) for a plan of ``model``
    made before it loads."""
    dev = plan_device(device)
    dtype = dtype if dtype != "auto" else ("bfloat16" if dev == "cuda" else "float32")
    rate = cached_rate(dev, dtype, model)
    if rate:
        return rate, f"{dev} {dtype}, throughput measured on this machine", True

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

    device = lm.torch_device.type
    key = f"{device_key(device, lm.dtype)}|{lm.name}"

    def timed(call) -> tuple[float, object]:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = call()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    def measure() -> dict:
        from ctxbench.model.decoding import cache_of, with_cache

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

    return Throughput.from_entry(RATES.lookup(key, measure))


