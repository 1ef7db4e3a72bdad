"""llama-cpp-python's library and files for ``--backend llamacpp`` (:mod:`ctxbench.backends.llamacpp`):
the GGUF file it runs, what it reads from it, its log, and one context's decoding.

A GGUF model runs as it is (the default model's own ``SmolLM2-135M-Instruct.Q4_1.gguf``: no
dequantised copy). A transformers checkpoint (a folder) is converted once to an F32 GGUF with
llama.cpp's own converter, ``convert_hf_to_gguf.py`` of the llama.cpp that llama-cpp-python vendors
(``scripts/setup.sh`` copies it, its ``conversion`` package and its own ``gguf-py`` out of the
source distribution it builds: the PyPI ``gguf`` package is older than that converter, which
needs ``gguf.LazyChunkedTensor``). The result is kept in ctxbench's cache, sealed by a manifest of
digests like the dequantised models (:mod:`ctxbench.model.cache`).

ctxbench feeds llama.cpp token ids from its own tokenizer, so llama.cpp's tokenizer never runs: where
the converter does not know a tokenizer's pre-tokenizer (it recognises known models by hashing
the tokens of a fixed text; the tests' byte tokenizer is none of them), the GGUF says ``default``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import subprocess
import sys
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ctxbench.errors import UserError
from ctxbench.model.cache import BadEntry, Schema, cache_root, discard, ignored, seal_dir, verify_dir
from ctxbench.parsing import short

CONVERTER_ENV = "CTXBENCH_LLAMACPP_CONVERTER"  # a folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/
GGUF_SCHEMA = Schema("llama.cpp gguf", 1)
GGUF_FILE = "model.gguf"
CHUNK = 512  # tokens per llama_decode (n_batch = n_ubatch): the logits llama.cpp holds are CHUNK x vocab float32
ROWS = 64  # logit rows reduced at a time in float64

# Runs the converter with the tokenizer fallback above (a subprocess: the converter puts its own
# gguf-py first on sys.path and configures logging for the whole process).
_DRIVER = r"""
import runpy, sys
here = sys.argv[1]
sys.path[:0] = [here, here + "/gguf-py"]
import conversion.base as base
known = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return "default"
base.TextModel.get_vocab_base_pre = pre
sys.argv = [here + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def converter_dir() -> Path | None:
    """Where llama.cpp's converter is: ``$CTXBENCH_LLAMACPP_CONVERTER``, else where
    ``CTXBENCH_LLAMACPP=1 bash scripts/setup.sh`` puts it (``<venv>/share/ctxbench/llama.cpp``); None
    where it is not there."""
    where = os.environ.get(CONVERTER_ENV) or os.path.join(sys.prefix, "share", "ctxbench", "llama.cpp")
    path = Path(where)
    return path if (path / "convert_hf_to_gguf.py").is_file() and (path / "conversion").is_dir() else None


def converted(checkpoint: Path, digest: str, version: str, install: str) -> Path:
    """The F32 GGUF of the transformers checkpoint folder ``checkpoint`` (its ctxbench ``digest``),
    converted once by llama.cpp's converter of llama-cpp-python ``version`` and kept in the cache."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", checkpoint.resolve().name)[:60]
    target = cache_root() / "gguf" / f"{name}-{digest.split(':')[-1]}-llamacpp{version}-f32"
    if _verified(target):
        return target / GGUF_FILE
    here = converter_dir()
    if here is None:
        raise UserError(f"--backend llamacpp converts the checkpoint '{checkpoint}' to GGUF with llama.cpp's convert_hf_to_gguf.py, "
                        "which is not installed", f"install it with {install}, or give a .gguf file")  # fmt: skip
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the checkpoint is a folder: nothing to fetch
        done = subprocess.run([sys.executable, "-c", _DRIVER, str(here), str(checkpoint), "--outtype", "f32", "--outfile", str(tmp / GGUF_FILE)],
                              capture_output=True, text=True, env=env, check=False)  # fmt: skip
        if done.returncode != 0 or not (tmp / GGUF_FILE).is_file():
            raise UserError(f"llama.cpp's converter cannot convert '{checkpoint}' to GGUF: {_last_line(done.stderr)}",
                            "run it with --backend hf, or give a .gguf file of the model")  # fmt: skip
        seal_dir(tmp, GGUF_SCHEMA)
        discard(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            import shutil  # only on the failure path

            shutil.rmtree(tmp, ignore_errors=True)
    return target / GGUF_FILE


def _verified(target: Path) -> bool:
    """Whether the converted entry at ``target`` can be used (absent: False, silently; a bad one is
    noted, removed and converted again)."""
    if not target.exists() and not target.is_symlink():
        return False
    try:
        verify_dir(target, GGUF_SCHEMA, lambda files: None if GGUF_FILE in files else f"its manifest lists no {GGUF_FILE}")
    except BadEntry as why:
        ignored(target, why, "converted again from the checkpoint")
        discard(target)
        return False
    return True


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip() and not line.lstrip().startswith(("File ", "^", "Traceback"))]
    return short(lines[-1] if lines else "it failed without a message", 200)


def weight_type(gguf: Path) -> str:
    """What the GGUF's matrices are stored as, llama.cpp's ``llama_model_ftype`` (the file's
    ``general.file_type``, else what its tensors are): ``float32`` for an all-F32 file (a converted
    checkpoint), else the type's name in lower case (``q4_1`` for the default model), which is what
    llama.cpp's matrix products compute with. The model is memory-mapped, not read (0.5 s)."""
    import llama_cpp  # optional: llama_cpp only where it is used
    from gguf import LlamaFileType  # optional: gguf only where it is used

    quiet(llama_cpp)
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
    if model is None:
        raise UserError(f"llama.cpp cannot load '{gguf}': {next(reversed(quiet(llama_cpp)), 'no reason given')}",
                        "check the file (ctxbench reads it with --backend hf), or use --backend hf")  # fmt: skip
    try:
        ftype = int(llama_cpp.llama_model_ftype(model)) & ~1024  # LLAMA_FTYPE_GUESSED: read from the tensors
    finally:
        llama_cpp.llama_model_free(model)
    try:
        name = LlamaFileType(ftype).name
    except ValueError:
        return f"ftype{ftype}"
    return "float32" if name == "ALL_F32" else name.removeprefix("MOSTLY_").lower()


_LOGGED: list = []  # [callback, lines]: llama.cpp's log callback (kept alive while the library may call it) and its last warnings


def quiet(lib) -> deque:
    """Route llama.cpp's log through a callback that prints nothing and keeps the last warning and
    error lines (for the message when a context cannot start). llama-cpp-python's own callback
    maps the log levels of an older ggml (WARN was 2; ggml's enum now reads DEBUG 1, INFO 2, WARN 3,
    ERROR 4), so with ``verbose=False`` it still printed llama.cpp's warnings into ctxbench's output."""
    if not _LOGGED:
        lines: deque = deque(maxlen=8)

        @lib.llama_log_callback
        def keep(level, text, user_data):
            if level in (3, 4):
                lines.append(text.decode("utf-8", "replace").strip())

        lib.llama_log_set(keep, ctypes.c_void_p(0))
        _LOGGED.extend([keep, lines])
    return _LOGGED[1]


def _close_at_exit(ref) -> None:
    ctx = ref()
    if ctx is not None:
        ctx.close()


class Context:
    """One llama.cpp context (a ``llama_cpp.Llama`` with its method's settings) and the tokens its KV
    cache holds at positions ``0 .. len(cached) - 1`` (sequence 0)."""

    def __init__(self, llm, n_batch: int) -> None:
        import llama_cpp  # optional: llama_cpp only where it is used

        self.llm, self.n_batch, self.cached = llm, n_batch, []
        self.lib = llama_cpp
        self.n_vocab = int(llm.n_vocab())
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        # freed before the interpreter tears llama_cpp's module down: a Llama left to its __del__
        # then raises "'NoneType' object is not callable" (a Python API caller need not close the engine)
        atexit.register(_close_at_exit, weakref.ref(self))

    @classmethod
    def start(cls, gguf: str, kwargs: dict, threads: int, batch: int = CHUNK) -> Context:
        import llama_cpp  # optional: llama_cpp only where it is used

        said = quiet(llama_cpp)
        said.clear()
        f32 = int(llama_cpp.GGML_TYPE_F32)
        try:
            llm = llama_cpp.Llama(model_path=gguf, n_batch=batch, n_ubatch=batch, n_threads=threads, n_threads_batch=threads,
                                  n_gpu_layers=0, type_k=f32, type_v=f32, flash_attn=False, logits_all=False, verbose=False,
                                  **kwargs)  # fmt: skip
        except ValueError as exc:  # llama-cpp-python's "Failed to create llama_context": llama.cpp logged why
            why = next((line for line in reversed(said) if line), str(exc))
            raise UserError(f"llama.cpp could not start a context of {kwargs.get('n_ctx')} tokens on {gguf}: {why}",
                            "run shorter lengths or free memory (the KV cache is float32), or use --backend hf") from None  # fmt: skip
        return cls(llm, batch)

    def close(self) -> None:
        if self.batch is not None:
            self.lib.llama_batch_free(self.batch)
            self.batch = None
        with contextlib.suppress(Exception):
            self.llm.close()

    def keep(self, n: int) -> None:
        """Forget every cached position from ``n`` on."""
        if n < len(self.cached):
            self.lib.llama_memory_seq_rm(self.lib.llama_get_memory(self.llm.ctx), 0, n, -1)
            self.cached = self.cached[:n]

    def feed(self, tokens, outputs_from: int = 0, rows: Callable | None = None) -> None:
        """Decode ``tokens`` after what is cached, :attr:`n_batch` at a time. Each token at index
        ``>= outputs_from`` (of ``tokens``) has its logits computed; after each chunk,
        ``rows(first, logits)`` gets them (``first``: the index of the chunk's first such token;
        ``logits``: a (rows, vocab) float32 view, valid until the next decode)."""
        import numpy as np  # start-up: numpy only where it runs

        lib, b = self.lib, self.batch
        for a in range(0, len(tokens), self.n_batch):
            part = tokens[a : a + self.n_batch]
            start = len(self.cached)
            outs = 0
            for j, t in enumerate(part):
                b.token[j], b.pos[j], b.n_seq_id[j] = int(t), start + j, 1
                b.seq_id[j][0] = 0
                b.logits[j] = a + j >= outputs_from
                outs += a + j >= outputs_from
            b.n_tokens = len(part)
            code = lib.llama_decode(self.llm.ctx, b)
            if code != 0:
                raise UserError(f"llama.cpp could not decode {len(part)} tokens at position {start} (llama_decode returned {code})",
                                "run shorter lengths, or free memory")  # fmt: skip
            self.cached += [int(t) for t in part]
            if outs and rows is not None:
                ptr = lib.llama_get_logits(self.llm.ctx)
                rows(max(a, outputs_from), np.ctypeslib.as_array(ptr, shape=(outs, self.n_vocab)))

    def nll(self, tokens, first: int) -> list:
        """Per-token NLL (float64 torch tensors, one per chunk) of ``tokens[first:]``, each given every
        token before it: ``tokens[:-1]`` fed, logits of the positions ``first - 1`` on."""
        import torch  # start-up: torch only where it runs

        parts = []

        def take(at: int, logits) -> None:
            target = torch.tensor([int(t) for t in tokens[at + 1 : at + 1 + len(logits)]])
            rows = torch.from_numpy(logits)
            for r in range(0, len(rows), ROWS):
                block = rows[r : r + ROWS].double()  # (<= ROWS, vocab)
                picked = block.gather(1, target[r : r + ROWS, None])[:, 0]
                parts.append(torch.logsumexp(block, dim=-1) - picked)

        self.feed(tokens[:-1], first - 1, take)
        return parts

    def last_logits(self, tokens):
        """Decode ``tokens`` after the cache and return the last one's logits (a float32 numpy copy)."""
        out = []
        self.feed(tokens, len(tokens) - 1, lambda at, logits: out.append(logits[-1].copy()))
        return out[0]
