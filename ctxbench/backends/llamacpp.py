"""The llama.cpp backend (``--backend llamacpp``): every task's forwards and greedy decoding on
llama.cpp, through llama-cpp-python (``CTXBENCH_LLAMACPP=1 bash scripts/setup.sh`` builds it).

A GGUF model runs as it is; a transformers checkpoint is converted once to an F32 GGUF with
llama.cpp's own converter (:mod:`ctxbench.backends.llamacpp_lib`). The tokenizer, geometry, stop
tokens and digest are ctxbench's own (:func:`ctxbench.model.describe.describe`, as on vLLM), so every
prompt is the same token ids as on the ``hf`` path and rows pair.

A method runs with exactly the settings ``ctxbench export --to llamacpp`` prints: both come from
:func:`ctxbench.methods.export.llamacpp_settings`, and :func:`llama_kwargs` translates each flag into
the ``llama_cpp.Llama`` argument llama.cpp's own ``common/arg.cpp`` sets from it (``--rope-scale N``
is ``rope_freq_scale = 1/N``). ``--ctx-size`` becomes the longest sequence the run asks for (a
server reserves ``s * L``; the context's size changes no number of these methods). A method the
export refuses is refused by :func:`check` before anything loads, in the export's words. The KV
cache is float32 (llama.cpp's default is f16), so the cache adds no rounding the reference lacks.

What it computes, and how it maps onto the ``hf`` path:

- per-token losses: the prompt through ``llama_decode`` in chunks of :data:`CHUNK` tokens, each
  chunk's logits (``llama_get_logits``: ``CHUNK x vocab`` float32, never ``length x vocab``) reduced
  to the target token's log-probability in float64 (``logsumexp(row) - row[target]``) before the next;
  sliding windows as the ``hf`` path cuts them, each window a fresh sequence;
- greedy answers: the argmax of each step's logits, the same stop tokens, the task's budget, a
  thinking budget's :class:`ctxbench.model.thinking.Steer` token by token; prompts are taken in
  token order and each keeps the KV cache of the prefix it shares with the one before
  (``llama_memory_seq_rm`` past it): the haystack goes through once per length;
- the answer NLL and scores: the continuation teacher-forced after the prompt, in the prompt's own
  prefill, the cache then cut back to the prompt for decoding.

Before the grid, each method setting is checked against transformers (:meth:`LlamaCppEngine.check_cells`):
llama-cpp-python cannot hand back rotary tables, so the outputs are compared instead.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ctxbench.backends.base import Engine
from ctxbench.backends.llamacpp_lib import CHUNK, Context, converted, weight_type
from ctxbench.errors import UserError
from ctxbench.methods import exportable
from ctxbench.methods.export import llamacpp_settings
from ctxbench.model.describe import describe
from ctxbench.model.files import check_model, load_counts, locate
from ctxbench.model.size import model_size
from ctxbench.synthetic.haystack import load_haystack

NAME = "llamacpp"
DIST = "llama-cpp-python"
VERSION = "0.3.36"  # the version scripts/setup.sh builds
INSTALL = f"CTXBENCH_LLAMACPP=1 bash scripts/setup.sh (builds {DIST} {VERSION} from source with cmake and g++: about 16 minutes on 2 cores)"
# Metrics that need the model's hidden states or a second, unscaled model: llama-cpp-python's
# high-level API returns neither, and ctxbench asks it for next-token logits only.
HIDDEN_METRICS = {"longppl": "the unscaled model's per-token losses in sliding windows of the trained length",
                  "kl": "the next-token distributions over the whole vocabulary of two models"}  # fmt: skip
# llama.cpp's names of the rope scaling types (include/llama.h, enum llama_rope_scaling_type)
ROPE_SCALING = {"none": 0, "linear": 1, "yarn": 2}
# Each export flag -> the llama_cpp.Llama argument llama.cpp's common/arg.cpp sets from it.
FLAG_ARGS = {
    "--rope-scaling": ("rope_scaling_type", lambda v: ROPE_SCALING[str(v)]),
    "--rope-scale": ("rope_freq_scale", lambda v: 1.0 / float(v)),
    "--rope-freq-base": ("rope_freq_base", float),
    "--yarn-orig-ctx": ("yarn_orig_ctx", int),
    "--yarn-ext-factor": ("yarn_ext_factor", float),
    "--yarn-attn-factor": ("yarn_attn_factor", float),
    "--yarn-beta-fast": ("yarn_beta_fast", float),
    "--yarn-beta-slow": ("yarn_beta_slow", float),
    "--ctx-size": ("n_ctx", int),
}
# The engine check's tolerances (:class:`Tolerance`), by what the GGUF's matrices are: an F32 GGUF
# computes what transformers does in float32 up to the order of sums; a quantized one multiplies with
# quantized weights and activations (Q4_1 weights, Q8_1 activations on the CPU) where transformers has
# the dequantised float32 weights, so single positions move by tenths of a nat and only windows agree.
# Measured on the tiny F32 GGUFs of the tests and the default Q4_1 model (docs/backends.md, "llama.cpp").
WINDOW = 64  # the check compares the mean NLL of each window of this many positions


@dataclass(frozen=True)
class Tolerance:
    """How far llama.cpp's NLLs may be from transformers': ``|a - b| <= atol + rtol * |b|`` for the
    mean NLL of each window of :data:`WINDOW` positions, and for each position's where ``position``
    (its ``(atol, rtol)``) is given."""

    window: tuple[float, float]
    position: tuple[float, float] | None = None

    def says(self) -> str:
        both = [("each window's mean", self.window), ("each position", self.position)]
        return "; ".join(f"{what} within {a:g} + {r:g} x NLL" for what, (a, r) in [(w, t) for w, t in both if t is not None])


TOLERANCE = {"float32": Tolerance(window=(1e-4, 1e-4), position=(1e-3, 1e-3)), "quantized": Tolerance(window=(0.1, 0.0))}


def version() -> str | None:
    """The installed llama-cpp-python's version, or None; no import of llama_cpp (it loads the library)."""
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return None


def check(methods, metrics, config) -> None:
    """Refuse, before the plan, what llama.cpp cannot run here: a method the export refuses (in its
    words), a metric that needs hidden states, a transformers-only option, a hub id (the converter
    needs a folder), a GPU or a dtype, or llama-cpp-python not installed."""
    for name, value, what in (("--attn", config.attn not in (None, "sdpa"), "llama.cpp runs its own attention"),
                              ("--device-map", config.device_map, "llama.cpp places the model itself"),
                              ("--quantization", config.quantization, "llama.cpp runs the GGUF's own quantization"),
                              ("--tensor-parallel", config.tensor_parallel != 1, "tensor parallelism is vLLM's"),
                              ("--device", str(config.device).startswith("cuda"),
                               "ctxbench builds llama-cpp-python for the CPU")):  # fmt: skip
        if value:
            raise UserError(f"{name} is not an option of --backend llamacpp ({what})", f"drop {name}, or use --backend hf")
    if config.dtype not in ("auto", "float32"):
        raise UserError(f"--dtype {config.dtype} with --backend llamacpp: llama.cpp computes with the GGUF's own weight types "
                        "(a checkpoint is converted to F32), activations and KV cache in float32",
                        "drop --dtype (or --dtype float32), or use --backend hf")  # fmt: skip
    for metric in metrics:
        if metric in HIDDEN_METRICS:
            raise UserError(f"--metrics {metric} needs {HIDDEN_METRICS[metric]}, which llama.cpp does not return here",
                            f"run --metrics {metric} with --backend hf (answer_nll runs on both)")  # fmt: skip
    for method in methods:
        reason = method.export_refusal("llamacpp")
        if reason is not None:
            raise UserError(f"llama.cpp cannot run method '{method.label}'" + (f": {reason}" if reason else ""),
                            f"run it with --backend hf, which runs every method (llama.cpp runs: {', '.join(runs())})")  # fmt: skip

    if locate(config.model)[0] == "hub":
        raise UserError(f"--backend llamacpp converts a checkpoint folder to GGUF, and '{config.model}' is a hub id",
                        f"download it first (huggingface-cli download {config.model} --local-dir DIR) and pass --model DIR, or give a .gguf file")  # fmt: skip
    if version() is None:
        raise UserError("--backend llamacpp needs llama-cpp-python, which is not installed", f"install it with {INSTALL}, or use --backend hf")


def runs() -> tuple[str, ...]:
    """The methods this backend runs: those ``export --to llamacpp`` expresses."""
    return exportable("llamacpp")


def llama_kwargs(flags: dict) -> dict:
    """The ``llama_cpp.Llama`` keyword arguments of :func:`ctxbench.methods.export.llamacpp_settings`'
    flags (:data:`FLAG_ARGS`); a flag this backend cannot pass is an error, not dropped."""
    out = {}
    for flag, value in flags.items():
        if flag not in FLAG_ARGS:
            raise UserError(f"--backend llamacpp cannot pass llama.cpp flag {flag} {value} to llama-cpp-python",
                            "run the method with --backend hf, or serve it with llama-server and these flags")  # fmt: skip
        name, convert = FLAG_ARGS[flag]
        out[name] = convert(value)
    return out


def engine_kwargs(method, geom, factor: float, n_ctx: int) -> dict:
    """What :meth:`LlamaCppEngine.engine` passes to ``llama_cpp.Llama`` for ``method`` at ``factor``
    on sequences of up to ``n_ctx`` tokens: the export's settings with the run's context size."""
    return {**llama_kwargs(llamacpp_settings(method, geom, factor)), "n_ctx": int(n_ctx)}


def load(config) -> LlamaCppEngine:
    """The model as llama.cpp runs it: a GGUF file as it is, a checkpoint folder converted once;
    described from its files by ctxbench's own loader (:func:`ctxbench.model.describe.describe`)."""
    kind, path, gguf = check_model(config.model)
    d = describe(config.model, config.trust_remote_code)
    engine_version = version() or "unknown"
    file = path / gguf if gguf else converted(Path(d.checkpoint), d.digest, engine_version, INSTALL)
    weights = weight_type(file)
    note = "" if weights == "float32" else f"llama.cpp multiplies with the GGUF's {weights.upper()} weights; activations and KV cache in float32"
    return LlamaCppEngine(tokenizer=d.tokenizer, geometry=d.geometry, name=d.name, digest=d.digest, device="cpu",
                          dtype=weights, gguf=str(file), stop=d.stop, engine_version=engine_version, dtype_note=note,
                          reference=lambda: _reference(config))  # fmt: skip


def _reference(config):
    """The same weights on transformers in float32 (a GGUF's dequantised model), for the engine check."""
    from ctxbench.backends.hf import HfEngine  # start-up: loads numpy, torch
    from ctxbench.model.load import load as load_model  # start-up: loads numpy, torch

    return HfEngine.of(load_model(config.model, device="cpu", dtype="float32", trust_remote_code=config.trust_remote_code, attn="sdpa"))


@dataclass
class LlamaCppEngine(Engine):
    """A GGUF model on llama.cpp: what rows need to say where numbers came from, and the context now
    running (one at a time: one per method setting and factor, restarted larger when a longer
    sequence comes)."""

    tokenizer: object
    geometry: object
    name: str
    digest: str
    device: str
    dtype: str  # float32 (an F32 GGUF), else the GGUF's weight type (q4_1)
    gguf: str  # the file llama.cpp loads
    stop: tuple[int, ...]  # the stop tokens of the hf path (model.decoding.stop_tokens)
    engine_version: str
    dtype_note: str = ""
    reference: Callable | None = None  # () -> the same weights on transformers (an HfEngine), for the engine check
    threads: int = 0  # llama.cpp's threads (0: every core this process may use)
    batch: int = CHUNK  # tokens per llama_decode
    reserved: int = 0  # the longest sequence the run will ask for (set by the runner)
    starts: list = field(default_factory=list)  # (key, seconds) of every context start
    checked: set = field(default_factory=set)  # (method, factor, length) the engine check passed
    _engine: tuple | None = None  # (key, n_ctx, Context)

    def identity(self) -> str:
        return f"{NAME} {self.engine_version}"

    @contextlib.contextmanager
    def session(self, method, factor: float, seq_len: int) -> Iterator[LlamaCppSession]:
        yield LlamaCppSession(self, method, float(factor), int(seq_len))

    def size(self):
        return model_size(self.name)

    def num_layers(self) -> int | None:
        try:
            return load_counts(self.name, False)[0]
        except Exception:  # noqa: BLE001 - a config ctxbench cannot read: llama.cpp reads the GGUF
            return None

    def check_layouts(self, jobs) -> None:
        """Refuse, before the plan, a method setting llama.cpp's flags cannot express with its
        parameters (yarn with ``truncate=false``), in the export's words."""
        for job in jobs:
            for method in getattr(job.settings, "methods", ()):
                for factor in getattr(job.settings, "factors", ()) or (1.0,):
                    engine_kwargs(method, self.geometry, float(factor or 1.0), 1)

    def check_cells(self, jobs, contexts) -> None:
        """The engine check, before the grid: for each method setting and factor of the cells, one
        probe document as long as the longest sequence the run asks for (the longest cell, plus the
        answer a task decodes past it) goes through llama.cpp and through ctxbench's transformers
        computation of the same method on the same weights (a GGUF's dequantised float32 model),
        and each position's NLL is compared (:func:`parting`). Every method llama.cpp runs is
        causal and fixed in its length (the export refuses the dynamic ones), so the probe's
        first L/2 and L positions are a probe of L/2 and of L tokens: one probe covers all three."""
        todo: dict = {}
        for job, ctx in zip(jobs, contexts, strict=True):
            past = int(getattr(job.settings, "max_new_tokens", 0) or 0)
            for cell in job.task.cells(job.settings, ctx):
                key = (cell.method, float(cell.factor or 1.0))
                todo[key] = max(todo.get(key, 0), cell.length + past)
        reference = None
        try:
            for (method, factor), n in todo.items():
                if (method, factor, n) in self.checked:
                    continue
                if reference is None:
                    reference = self.reference() if self.reference is not None else None
                if reference is None:
                    raise UserError("the llama.cpp engine check has no transformers model to compare with", "run it with --backend hf")
                self.engine_check(reference, method, factor, n)
        finally:
            del reference
            gc.collect()

    def engine_check(self, reference, method, factor: float, n: int) -> None:
        """Raise :class:`UserError` where llama.cpp's per-position NLL of the probe document of
        ``n`` tokens parts from ``reference``'s (an :class:`ctxbench.backends.hf.HfEngine`) under
        ``method`` at ``factor``."""
        import torch  # start-up: torch only where it runs

        ids = torch.tensor(probe_ids(self.tokenizer, n))
        with self.session(method, factor, n) as s:
            got = s.token_nll(ids)
        with reference.session(method, factor, n) as s:
            want = s.token_nll(ids)
        kind = "float32" if self.dtype == "float32" else "quantized"
        found = parting(got, want, TOLERANCE[kind])
        if found is not None:
            where, a, b, what = found
            beyond = "" if where < self.geometry.trained_len else f", past the trained length {self.geometry.trained_len}"
            weights = "F32" if kind == "float32" else self.dtype.upper()
            raise UserError(f"llama.cpp {self.engine_version} does not compute {method.label} x{factor:g} as transformers does on "
                            f"{self.name}: at position {where}{beyond} of a {n}-token probe, {what} is {a:.6g} on llama.cpp and "
                            f"{b:.6g} on transformers ({weights} weights: {TOLERANCE[kind].says()})",
                            "run it with --backend hf; llama.cpp reads the method's settings differently")  # fmt: skip
        self.checked.add((method, factor, n))

    def reserve(self, longest: int) -> None:
        self.reserved = longest

    def engine_starts(self, cells) -> int:
        """One context per method setting and factor."""
        return len({(c.method, float(c.factor or 1.0)) for c in cells})

    def start_seconds(self) -> list[float]:
        return [seconds for _, seconds in self.starts]

    def engine(self, method, factor: float, need: int) -> Context:
        """The context for ``method`` at ``factor`` able to hold ``need`` tokens: the running one if it
        is that, else a new one (the old one freed first)."""
        key = (method, factor)
        if self._engine is not None and self._engine[0] == key and self._engine[1] >= need:
            return self._engine[2]
        self.close()
        n_ctx = max(int(need), self.reserved, 1)
        kwargs = engine_kwargs(method, self.geometry, factor, n_ctx)
        t0 = time.perf_counter()
        ctx = Context.start(self.gguf, kwargs, self.threads or len(os.sched_getaffinity(0)), self.batch)
        self.starts.append((key, time.perf_counter() - t0))
        self._engine = (key, n_ctx, ctx)
        return ctx

    def close(self) -> None:
        if self._engine is not None:
            ctx = self._engine[2]
            self._engine = None
            ctx.close()
            gc.collect()


def probe_ids(tokenizer, n: int) -> list[int]:
    """The engine check's probe document: the first ``n`` tokens of ctxbench's built-in prose (Python's
    language reference, :func:`ctxbench.synthetic.haystack.load_haystack`), repeated if it is shorter."""
    text = load_haystack(None).text
    ids: list[int] = []
    while len(ids) < n:
        ids += list(tokenizer(text[: 8 * n], add_special_tokens=False)["input_ids"])
    return ids[:n]


def parting(got, want, tolerance: Tolerance, window: int = WINDOW):
    """Where two per-token NLLs (``[i]``: the NLL of token ``i + 1``) part, by ``tolerance``:
    ``(position, got, want, what)`` of the first token beyond it (each position's, where the tolerance
    has one), else of the first window of ``window`` tokens whose means are beyond it (its first
    token); None where they agree. A quantized model is held to windows only, where its rounding
    averages out and a method read differently does not."""
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        return (min(len(got), len(want)), float(len(got)), float(len(want)), "the number of scored positions")
    if tolerance.position is not None:
        atol, rtol = tolerance.position
        bad = (got - want).abs() > atol + rtol * want.abs()
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            return (i + 1, float(got[i]), float(want[i]), "the NLL")
    atol, rtol = tolerance.window
    for a in range(0, len(got), window):
        g, w = float(got[a : a + window].mean()), float(want[a : a + window].mean())
        if abs(g - w) > atol + rtol * abs(w):
            return (a + 1, g, w, f"the mean NLL of positions {a + 1}-{min(a + window, len(got))}")
    return None


@dataclass(frozen=True)
class LlamaCppSession:
    """One method setting at one factor on llama.cpp (:class:`ctxbench.backends.base.Session`)."""

    lm: LlamaCppEngine
    method: object
    factor: float
    seq_len: int

    def _context(self, need: int) -> Context:
        return self.lm.engine(self.method, self.factor, max(need, self.seq_len))

    def _scored(self, ids: list[int], first: int):
        import torch  # start-up: torch only where it runs

        ctx = self._context(len(ids))
        ctx.keep(0)
        parts = ctx.nll(ids, first)
        return torch.cat(parts).float() if parts else torch.zeros(0, dtype=torch.float32)

    def token_nll(self, ids, chunk: int = 1024):
        return self._scored([int(t) for t in ids], 1)

    def sliding_nll(self, ids, window: int, stride: int, chunk: int = 1024):
        import torch  # start-up: torch only where it runs

        ids = [int(t) for t in ids]
        parts, scored_to, begin = [], 1, 0  # model.scoring.sliding_nll's windows: each scores what the last did not
        while scored_to < len(ids):
            end = min(begin + window, len(ids))
            parts.append(self._scored(ids[begin:end], max(scored_to, begin + 1) - begin))
            scored_to, begin = end, begin + stride
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float32)

    def _prompt(self, ctx: Context, prompt: list[int], share: bool):
        """The prompt's last logits, the cache holding the prompt (what it shares with the cache kept)."""
        from ctxbench.model.decoding import common_prefix  # start-up: loads numpy, torch

        keep = min(common_prefix(ctx.cached, prompt), len(prompt) - 1) if share else 0
        ctx.keep(keep)
        return ctx.last_logits(prompt[keep:])

    def _continuation(self, ctx: Context, prompt: list[int], last, continuation: list[int]):
        """(k,) float32 NLL of ``continuation`` after ``prompt`` (cached, ``last`` its last logits);
        the cache is cut back to the prompt afterwards."""
        import torch  # start-up: torch only where it runs

        first = torch.from_numpy(last).double()
        head = torch.logsumexp(first, dim=-1) - first[continuation[0]]
        parts = [head[None], *ctx.nll(continuation, 1)]  # continuation[:-1] fed after the prompt
        ctx.keep(len(prompt))
        return torch.cat(parts).float()

    def answers(self, prompts, max_new_tokens: int, finished=None, share: bool = True, continuations=None, think=None):
        import numpy as np  # start-up: numpy only where it runs

        from ctxbench.model.decoding import Answer  # start-up: loads numpy, torch

        prompts = [[int(t) for t in p] for p in prompts]
        steps = max_new_tokens if think is None else think.steps(max_new_tokens)
        need = max(len(p) + steps + (len(continuations[i]) if continuations is not None else 0) for i, p in enumerate(prompts))
        ctx = self._context(need)
        stop = set(self.lm.stop)
        for i in sorted(range(len(prompts)), key=lambda i: prompts[i]):  # neighbours in token order share the most
            t0 = time.perf_counter()
            p = prompts[i]
            logits = self._prompt(ctx, p, share)
            nll = None if continuations is None else self._continuation(ctx, p, logits, [int(t) for t in continuations[i]])
            steer = None if think is None else think.steer(p, max_new_tokens)  # the budget's rule, token by token
            new: list[int] = []
            for step in range(steps):
                token = int(np.argmax(logits))
                token = token if steer is None else steer.take(token)
                new.append(token)
                seen = new if steer is None else list(steer.answer(new))
                if token in stop or (finished is not None and seen and finished(i, seen)) or (steer is not None and steer.spent):
                    break
                if step == steps - 1:
                    break
                logits = ctx.last_logits([token])
            yield Answer(i, tuple(new), time.perf_counter() - t0, nll, forced=bool(steer and steer.forced))

    def scores(self, prompts, continuations, share: bool = True):
        from ctxbench.model.decoding import Scored  # start-up: loads numpy, torch

        prompts = [[int(t) for t in p] for p in prompts]
        ctx = self._context(max(len(p) + len(c) for p, c in zip(prompts, continuations, strict=True)))
        for i in sorted(range(len(prompts)), key=lambda i: prompts[i]):
            t0 = time.perf_counter()
            logits = self._prompt(ctx, prompts[i], share)
            nll = self._continuation(ctx, prompts[i], logits, [int(t) for t in continuations[i]])
            yield Scored(i, nll, time.perf_counter() - t0)

    def _no_hidden(self, *args, **kwargs):
        raise UserError("llama.cpp returns no hidden states here (--metrics longppl and kl need them)", "use --backend hf for those metrics")

    hidden = nll_from_hidden = kl_from_hidden = _no_hidden
