"""A model described from its files, without building it: what an engine that loads the weights
itself (vLLM) needs from ctxbench -- the tokenizer, the RoPE geometry (from the config), the stop
tokens (generation config and tokenizer), the digest rows pair on, and the checkpoint the engine
loads. Reads config.json, the tokenizer files, generation_config.json and file digests: host memory
does not grow with the parameter count.

The digest is the one :func:`ctxbench.model.load.load` gives the same model (a GGUF file's digest, a
folder's file digests, a hub revision), so rows of both backends pair. A GGUF model's engine loads
its dequantised checkpoint, which the transformers loader writes once (``~/.cache/ctxbench/models``):
when it is not there yet, this loads the model once to write it, and never again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxbench.errors import UserError
from ctxbench.model.geometry import RopeGeometry

if TYPE_CHECKING:
    from ctxbench.model.geometry import RopeGeometry


@dataclass(frozen=True)
class ModelDescription:
    tokenizer: object
    geometry: RopeGeometry
    name: str
    digest: str
    checkpoint: str  # what an engine loads: a folder or a hub id
    stop: tuple[int, ...]  # ctxbench.model.decoding.stop_tokens of the loaded model


def stop_ids(generation_eos, tokenizer) -> tuple[int, ...]:
    """The generation config's ``eos_token_id`` (an id or a list) and the tokenizer's, in that order,
    each once (:func:`ctxbench.model.decoding.stop_tokens` of a loaded model)."""
    ids: list[int] = []
    for source in (generation_eos, getattr(tokenizer, "eos_token_id", None)):
        for i in source if isinstance(source, (list, tuple)) else [source]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return tuple(ids)


def describe(spec: str, trust_remote_code: bool = False) -> ModelDescription:
    """``spec`` (a folder, a GGUF file or alias, a hub id) described from its files."""
    import torch  # start-up: torch only where it runs
    from transformers import AutoTokenizer, GenerationConfig  # start-up: transformers only where it runs

    from ctxbench.model.files import (  # load_config looked up when called (tests replace it)
        check_model,
        dir_digest,
        file_digest,
        load_config,
    )
    from ctxbench.model.load import dequantised_path, load, verified_model  # start-up: loads numpy, torch

    kind, path, gguf = check_model(spec)  # damaged files: one clear line
    if gguf:
        assert path is not None  # (a GGUF model is a local file)
        cached = dequantised_path(path / gguf, torch.float32)
        if cached is None:
            raise UserError(f"an engine cannot read the GGUF model '{spec}' and its dequantised cache is turned off (CTXBENCH_NO_MODEL_CACHE)",
                            "unset CTXBENCH_NO_MODEL_CACHE, so ctxbench writes the checkpoint the engine loads")  # fmt: skip
        if not verified_model(cached):  # the first time only: the transformers loader writes it
            load(spec, device="cpu", dtype="float32", trust_remote_code=trust_remote_code, attn="sdpa")
        source, digest = str(cached), file_digest(path / gguf)
    else:
        source = str(path) if path else spec
        digest = dir_digest(path) if kind == "dir" and path is not None else ""  # (a folder's path is always set)
    config = load_config(source, trust_remote_code)
    if kind == "hub":
        digest = "hub:" + str(getattr(config, "_commit_hash", None) or "unknown")
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    try:
        generation = GenerationConfig.from_pretrained(source)
    except OSError:  # no generation_config.json: what transformers derives from the model's config
        generation = GenerationConfig.from_model_config(config)
    return ModelDescription(tokenizer=tokenizer, geometry=RopeGeometry.from_config(config), name=spec, digest=digest,
                            checkpoint=source, stop=stop_ids(generation.eos_token_id, tokenizer))  # fmt: skip
