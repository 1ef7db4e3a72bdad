"""The GGUF file ``--backend llamacpp`` runs, and what ctxbench reads from it.

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

import os
import re
import subprocess
import sys
from pathlib import Path

from ctxbench.errors import UserError
from ctxbench.model.cache import BadEntry, Schema, cache_root, discard, ignored, seal_dir, verify_dir

CONVERTER_ENV = "CTXBENCH_LLAMACPP_CONVERTER"  # a folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/
GGUF_SCHEMA = Schema("llama.cpp gguf", 1)
GGUF_FILE = "model.gguf"

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
            import shutil

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
    from ctxbench.parsing import short

    lines = [line.strip() for line in str(text).splitlines() if line.strip() and not line.lstrip().startswith(("File ", "^", "Traceback"))]
    return short(lines[-1] if lines else "it failed without a message", 200)

