"""Test helpers the test modules import (``from helpers import tiny_llama``): tiny models built
in-process from a config, a byte-level tokenizer, scripted models, and the paths of the repository."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]  # the repository
TESTS = ROOT / "tests"
DATA = TESTS / "data"  # committed inputs of the tests
RESULTS = ROOT / "results"  # the committed results


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




def save_with_tokenizer(model, path):
    """``model`` and the byte tokenizer saved to ``path``, where ``ctxbench --model PATH`` loads them."""
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path




def run_settings(lm, task: str, settings, out=None, shard=None, seed: int = 0):
    """One task's grid through the runner (the path the CLI and API share); returns its Outcome."""
    from ctxbench.runner.grid import Job, MemoryResults, run_task
    from ctxbench.tasks import get

    if out is None:
        results = MemoryResults()
    else:
        from ctxbench.results.store import ResultsFile

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
    from ctxbench.backends.hf import HfEngine as LoadedModel
    from ctxbench.model.geometry import RopeGeometry

    return LoadedModel(ScriptedLM(script), tokenizer, RopeGeometry(head_dim=16, rotary_dim=16, base=10000.0, trained_len=TRAINED),
                       name="scripted", digest="scripted", device="cpu", dtype="float32")  # fmt: skip


def cli_main(argv, monkeypatch, capsys) -> tuple[int, str, str]:
    """``ctxbench ARGV`` in-process through ``main`` (its error handling included, so exit codes and
    the one-line errors are the command's own): (code, stdout, stderr)."""
    import sys

    from ctxbench.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    try:
        main()
        code = 0
    except SystemExit as exc:  # as Python exits: None is 0, a message 1
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(code, stderr, words) -> str:
    """The single ``error: what — fix`` line of a refusal (exit 2, no traceback), holding ``words``."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def expanded_forwards(item) -> tuple[int, ...]:
    """A plan item's forwards one entry per run (``CostItem`` states a repeated forward once, with its count)."""
    return tuple(tokens for tokens, _, times in item.runs() for _ in range(times))


def read_csv(path) -> tuple[list[str], list[dict]]:
    """A CSV file's header and rows, as text."""
    import csv

    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames), list(reader)


def csv_text(header: list[str], rows: list[dict]) -> str:
    """Rows written back as CSV text (for hand edits of results files)."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
