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

Time is fitted, per part, from measurements at two lengths: the linear part (weights and head)
and the attention part (quadratic in the context) run at different rates (on a GPU the weights'
matmuls of a small model are far from the peak while long attention is not; on a CPU attention is
the slower half), so one rate from one length misplans every other length: a plan priced at one
1024-token forward on an H100 said 2.2 min for a grid that took 23 s. A forward of ``n`` tokens takes

    seconds(n) = linear_flops(n) / R_linear  +  attention_flops(n) / R_attention

with the two rates solved from forwards of 1024 and 4096 tokens (:func:`fit`), and the same for
decoding steps from steps on caches of those two sizes (latency-bound: 20 times fewer FLOP/s on a
CPU). Why 1024 and 4096: attention is 14% of a 1k forward's FLOPs and 40% of a 4k one's for the
default model, enough spread to separate the two rates; with a 4k warm-up and the decoding steps
the measurement costs about 25 s of a 2-core CPU in float32 (8k would give more spread but cost
three times as much on every first run; a 2k second length is cheaper but gives too little).

Measured once per (device, dtype, model) on its first run and cached (see :func:`measured_rate`).
Until then the default model on a CPU uses :data:`DEFAULT_CPU` (fitted the same way from the
development CPU's 1.64 s at 1k and 10.39 s at 4k, 46 ms a step at 1k of context and 85 ms at 8k);
anything else gets tokens and FLOPs but no time. Loading the model and tokenising are not counted.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxbench.methods.setting import resolve
from ctxbench.model.autodtype import device_key, planned
from ctxbench.model.cache import BadEntry, JsonCache, Schema, positive_number
from ctxbench.model.files import ALIASES
from ctxbench.model.size import Flops, ModelSize

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ctxbench.backends.base import Engine
    from ctxbench.methods.setting import MethodSetting
    from ctxbench.tasks.base import CostItem


def plan_device(device: str) -> str:
    """The device type a run will use, without importing torch: ``auto`` is cuda where an NVIDIA
    driver is loaded, else cpu."""
    if device and device != "auto":
        return device.split(":")[0]
    return "cuda" if Path("/proc/driver/nvidia/version").exists() else "cpu"


RATE_FIELDS = ("linear", "attention", "decode_linear", "decode_attention")


@dataclass(frozen=True)
class Throughput:
    """FLOP/s a model reaches on a device, per part of its work (:class:`~ctxbench.model.size.Flops`):
    the weights and head of forwards (``linear``), their attention (``attention``), and the same two
    parts of one-token decoding steps (far lower: each step is a chain of small kernels that reads
    the whole KV cache)."""

    linear: float
    attention: float
    decode_linear: float
    decode_attention: float

    def seconds(self, work: Flops) -> float:
        return (work.linear / self.linear + work.attention / self.attention
                + work.decode_linear / self.decode_linear + work.decode_attention / self.decode_attention)  # fmt: skip

    @classmethod
    def from_entry(cls, entry: Any) -> Throughput:
        """From its ``rates.json`` entry (a table of :data:`RATE_FIELDS`), checked by
        :func:`_is_rate` on the way in."""
        return cls(*(float(entry[name]) for name in RATE_FIELDS))

    def entry(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in RATE_FIELDS}


def fit(points: Iterable[tuple[float, float, float]]) -> tuple[float, float, bool]:
    """(linear FLOP/s, attention FLOP/s, whether the two were told apart) from measurements
    ``(linear_flops, attention_flops, seconds)`` at two or more sizes: the least-squares solution of
    ``seconds = linear_flops * a + attention_flops * b`` (exact for two points), rates ``1/a`` and
    ``1/b``. A solution that is not two positive numbers (noise on a busy machine: the long
    measurement cheaper than its linear part, or one more than its FLOPs allow) is not a rate; the
    fallback is one rate for all FLOPs over every measurement (what a single length gave before),
    and False."""
    points = [(float(x), float(y), float(t)) for x, y, t in points]
    xx = sum(x * x for x, _, _ in points)
    xy = sum(x * y for x, y, _ in points)
    yy = sum(y * y for _, y, _ in points)
    xt = sum(x * t for x, _, t in points)
    yt = sum(y * t for _, y, t in points)
    det = xx * yy - xy * xy
    if det > 1e-12 * xx * yy:
        a, b = (xt * yy - yt * xy) / det, (yt * xx - xt * xy) / det
        if a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b):
            return 1 / a, 1 / b, True
    seconds = sum(t for _, _, t in points)
    rate = sum(x + y for x, y, _ in points) / max(seconds, 1e-12)
    return rate, rate, False


# The default model on the 2-core development CPU (AMD EPYC, float32), fitted by :func:`fit` from
# scripts/bench_forward.py's 1.64 s at 1k and 10.39 s at 4k, and 46 ms a step at 1k of context and
# 85 ms at 8k: 12 s for a 4k forward, about 108 s at 16k.
DEFAULT_CPU = Throughput(linear=1.65e11, attention=1.14e11, decode_linear=6.65e9, decode_attention=1.27e10)


# The rates a real machine can reach, in FLOP/s: above 1e4 (a tiny test model's decoding step, all
# overhead, still does 1e6 and more) and below a whole rack of accelerators (1e18; one H100 does
# about 1e15 in bf16). A sealed 1e-300 passed
# "finite and > 0" and planned "about inf min"; 1e300 planned every grid as free.
RATE_FLOOR, RATE_CEILING = 1e4, 1e18


def _is_rate(value: object) -> None:
    """A throughput a plan can divide by: exactly :data:`RATE_FIELDS`, each a finite FLOP/s a real
    machine could have (between :data:`RATE_FLOOR` and :data:`RATE_CEILING`; a zero divided every
    plan by zero, a NaN made its time NaN, a 1e-300 made it infinite)."""
    if not isinstance(value, dict) or set(value) != set(RATE_FIELDS):
        raise BadEntry(f"{type(value).__name__} {str(value)[:60]}, not {{{', '.join(RATE_FIELDS)}}}")
    for name in RATE_FIELDS:
        rate = positive_number(value[name], f"{name} rate")
        if not RATE_FLOOR <= rate <= RATE_CEILING:
            raise BadEntry(f"{name} rate {rate:.3g} FLOP/s is implausible: no machine runs outside {RATE_FLOOR:.0e}..{RATE_CEILING:.0e}")


# Keyed by device, dtype and model. Bump the version when the calibration changes: older rates are
# then measured again. Version 4: a linear and an attention rate each for forwards and decoding,
# fitted from two lengths (version 3 held one forward rate and one decoding rate, from one length).
RATES: JsonCache[dict[str, float]] = JsonCache("rates.json", Schema("throughputs", 4), _is_rate, then="measured again on the next run")


def cached_rate(device: str, dtype: str, model: str) -> Throughput | None:
    """The throughput ``model`` reached on this device and dtype before, if measured (and if its
    entry verifies: a bad one is noted and dropped, and the plan falls back as if never measured)."""
    entry = RATES.get(f"{device_key(device, dtype)}|{model}")
    return None if entry is None else Throughput.from_entry(entry)


def planned_dtype(device: str, dtype: str, model: str) -> tuple[str, str]:
    """(dtype, why) a run of ``model`` will use on device type ``device``: ``auto`` is bfloat16 on
    a GPU, and on a CPU what :func:`ctxbench.model.autodtype.planned` says (why is "" unless auto)."""
    if dtype != "auto":
        return dtype, ""
    if device == "cpu":
        return planned(model)
    return "bfloat16", f"auto: bfloat16 on {device}"


def rate_for_plan(device: str, dtype: str, model: str) -> tuple[Throughput | None, str, bool]:
    """(throughput, how it was obtained, whether it was measured here) for a plan of ``model``
    made before it loads."""
    dev = plan_device(device)
    dtype = planned_dtype(dev, dtype, model)[0]
    rate = cached_rate(dev, dtype, model)
    if rate:
        return rate, f"{dev} {dtype}, throughput measured on this machine", True

    if dev == "cpu" and dtype == "float32" and model in ALIASES:
        return DEFAULT_CPU, "cpu float32, throughput of a 2-core CPU (not yet measured here)", False
    return None, f"{dev} {dtype}: throughput not measured yet (the first run on this device measures it)", False


# The lengths a throughput is measured at (see the module's doc for why these two).
CALIBRATION_LENGTHS = (1024, 4096)


def measured_rate(lm: Engine, lengths: tuple[int, int] = CALIBRATION_LENGTHS, steps: int = 8) -> Throughput:
    """The loaded model's throughput on its device and dtype, fitted (:func:`fit`) from one timed
    forward at each of ``lengths`` and ``steps`` timed decoding steps on each forward's cache. An
    untimed forward of the longest shape goes first (the first call pays for page faults and
    kernel selection, and a smaller shape then reuses its memory), and one untimed step before each
    timed series. Cached per (device, dtype, model): small models reach a smaller share of a
    device's peak than big ones, so the rate of one does not carry over to another. Measured on a
    busy machine it is low, and stays so: delete ``rates.json`` in the cache to redo it."""
    calibration = lm.calibration()
    if calibration is None:
        raise ValueError(f"the {lm.identity()} backend runs no forward of its own to time: its plan uses the assumed rate")
    device, timed = calibration
    key = f"{device_key(device, lm.dtype)}|{lm.name}"

    def measure() -> dict[str, float]:
        size = lm.size()
        forwards, decodes = [], []
        for n, seconds, step_seconds in timed(tuple(sorted(lengths)), steps):
            work = size.forward_parts(n, head_tokens=1)
            forwards.append((work.linear, work.attention, seconds))
            parts = sum((size.step_parts(n + 1 + i) for i in range(steps)), Flops())
            decodes.append((parts.decode_linear, parts.decode_attention, step_seconds))
        linear, attention, _ = fit(forwards)
        decode_linear, decode_attention, _ = fit(decodes)
        return Throughput(linear, attention, decode_linear, decode_attention).entry()

    return Throughput.from_entry(RATES.lookup(key, measure))


# An attention-level method (ReRoPE, Self-Extend, DCA, STRING, Ms-PoE, the log-n family) runs
# ctxbench's own attention, which costs more or less than the model's plain one. A plan prices each
# such forward's attention FLOPs at ``factor`` times the plain attention rate:
#
#     seconds(n) = linear_flops(n) / R_linear  +  factor(path) * attention_flops(n) / R_attention
#
# with ``factor`` measured once per (device, dtype, model, attention path) -- the path as the registry
# entry's fields say (:attr:`ctxbench.methods.setting.MethodSetting.attention_path`), so every
# two-branch method shares the factor of the first one measured -- from a forward of the method and a
# plain one of :data:`FACTOR_LENGTH` tokens in the same measurement:
#
#     factor = 1 + (t_method - t_plain) / (t_plain * attention share of the plain forward)
#
# the attention share from the fitted rates. Why 4096: the longer calibration length, where attention
# is 40% of the default model's forward, and past the default window of the two-branch methods on a
# model trained at 8k (L/4 = 2048), so their far branch runs; on a model trained past 16k the window
# covers the whole measurement and the factor is that of the near branch and the rotations only.
FACTOR_LENGTH = CALIBRATION_LENGTHS[-1]
FACTOR_FIELDS = ("factor", "length", "method")
# Below 0.05 or above 100 a factor is noise or a broken cache, not a kernel: the plan would be free or
# hours long. The floor also bounds a measurement on a busy machine (a plain forward slowed after the
# method's).
FACTOR_FLOOR, FACTOR_CEILING = 0.05, 100.0


def _is_factor(value: object) -> None:
    """A cost factor a plan can multiply by: exactly :data:`FACTOR_FIELDS`, the factor between
    :data:`FACTOR_FLOOR` and :data:`FACTOR_CEILING`, measured at a whole number of tokens >= 1."""
    if not isinstance(value, dict) or set(value) != set(FACTOR_FIELDS):
        raise BadEntry(f"{type(value).__name__} {str(value)[:60]}, not {{{', '.join(FACTOR_FIELDS)}}}")
    factor = positive_number(value["factor"], "cost factor")
    if not FACTOR_FLOOR <= factor <= FACTOR_CEILING:
        raise BadEntry(f"cost factor {factor:.3g} is implausible: outside {FACTOR_FLOOR}..{FACTOR_CEILING}")
    if isinstance(value["length"], bool) or not isinstance(value["length"], int) or value["length"] < 1:
        raise BadEntry(f"length {value['length']!r} is not a whole number of tokens >= 1")
    if not isinstance(value["method"], str):
        raise BadEntry(f"method {value['method']!r} is not a method label")


# Keyed by device, dtype, model and attention path.
PATH_FACTORS: JsonCache[dict[str, Any]] = JsonCache("attention_costs.json", Schema("attention-cost-factors", 1), _is_factor, then="measured again on the next run")


def _factor_key(device: str, dtype: str, model: str, path: str) -> str:
    return f"{device_key(device, dtype)}|{model}|{path}"


def factors_for_plan(device: str, dtype: str, model: str, paths: Iterable[str]) -> dict[str, float]:
    """``{path: factor}`` of the attention ``paths`` measured for ``model`` on this device and dtype
    (a path not measured yet is missing: its plan prices it as a plain forward and says so)."""
    dev = plan_device(device)
    dtype = planned_dtype(dev, dtype, model)[0]
    out = {}
    for path in paths:
        entry: Any = PATH_FACTORS.get(_factor_key(dev, dtype, model, path)) if path else None  # (checked by _is_factor)
        if entry is not None:
            out[path] = float(entry["factor"])
    return out


def item_work(item: CostItem, size: ModelSize, factors: dict[str, float] | None = None) -> Flops:
    """The FLOPs of a plan's cost item (:class:`ctxbench.tasks.base.CostItem`): each distinct forward
    once, times its count (a suffix attending to what is cached before it), their attention at the
    measured cost factor of the item's attention path (``factors``, :func:`factors_for_plan`; a path
    missing there, or none, at 1), then its decoding steps on the longest context."""
    runs = item.runs()
    work = sum((k * size.forward_parts(n, cached=c) for n, c, k in runs), Flops())
    work = replace(work, attention=work.attention * (factors or {}).get(item.path, 1.0))  # its own attention's cost
    if item.decode_steps:
        work = work + item.decode_steps * size.step_parts(max((n + c for n, c, _ in runs), default=0))
    return work


def attention_factor(t_method: float, t_plain: float, work: Flops, rate: Throughput) -> float:
    """The cost factor of a method's attention (see :data:`FACTOR_LENGTH`): its forward's extra
    seconds over the plain one's, per second of the plain forward's attention, plus one."""
    linear_s, attention_s = work.linear / rate.linear, work.attention / rate.attention
    share = attention_s / (linear_s + attention_s)
    return min(FACTOR_CEILING, max(FACTOR_FLOOR, 1 + (t_method - t_plain) / (t_plain * share)))


def measured_factor(lm: Engine, setting: MethodSetting, factor: float, rate: Throughput, length: int = FACTOR_LENGTH) -> float:
    """The cost factor of ``setting``'s attention path on the loaded model (cached per device,
    dtype, model and path): a plain forward and one of ``setting`` at ``factor``, each of ``length``
    tokens of per-token NLL (what ppl runs; the head in chunks), each after an untimed one of a
    quarter of the length (the first call of a path pays for its set-up)."""
    import torch  # only here: a plan made from the cache imports no torch

    calibration = lm.calibration()
    if calibration is None:
        raise ValueError(f"the {lm.identity()} backend runs no forward of its own to time")
    device = calibration[0]
    key = _factor_key(device, lm.dtype, lm.name, setting.attention_path)

    def measure() -> dict[str, Any]:
        vocab = int(getattr(lm.tokenizer, "vocab_size", 0) or 2)
        ids = torch.randint(0, min(vocab, 1000), (length,))  # (length,)
        seconds = []
        for s, f in ((resolve("none"), 1.0), (setting, factor)):
            with lm.session(s, f, length) as session:
                session.token_nll(ids[: max(2, length // 4)])  # warm-up
                t0 = time.perf_counter()
                session.token_nll(ids)
                seconds.append(time.perf_counter() - t0)
        work = lm.size().forward_parts(length)
        return {"factor": attention_factor(seconds[1], seconds[0], work, rate), "length": length, "method": setting.label}

    entry: Any = PATH_FACTORS.lookup(key, measure)  # (checked by _is_factor)
    return float(entry["factor"])
