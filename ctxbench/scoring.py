"""Per-token negative log-likelihood from hidden states, in chunks.

A 16k-token window of a 49k-vocabulary model would need a 3 GB fp32 logits tensor; scoring
from the final hidden states ``chunk`` positions at a time keeps it at ``chunk x vocab``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The model without its LM head (``model.model`` for Llama-style models)."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    return base if base is not None else model.get_decoder()


def head_logits(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """fp32 logits for ``hidden`` (batch, n, hidden_size) -> (batch, n, vocab), with the model's
    logit scale / final soft-capping where its config has one."""
    logits = model.get_output_embeddings()(hidden).float()
    scale = getattr(model.config, "logit_scale", None)
    if isinstance(scale, (int, float)) and scale != 1:
        logits = logits * scale
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


@torch.inference_mode()
def token_nll(model: torch.nn.Module, ids: torch.Tensor, first_target: int = 1, chunk: int = 1024) -> torch.Tensor:
    """NLL of ``ids[first_target:]`` given everything before it, in one forward over ``ids``.

    ids: (n,) token ids. Returns (n - first_target,) float32 NLLs in nats.
    """
    device = next(model.parameters()).device
    ids = ids.to(device=device, dtype=torch.long)[None]  # (1, n)
    hidden = decoder(model)(input_ids=ids, use_cache=False).last_hidden_state  # (1, n, hidden)
    targets = ids[0, first_target:]  # (m,)
    out = torch.empty(targets.shape[0], dtype=torch.float32, device=device)
    m = targets.shape[0]
    for a in range(0, m, chunk):
        c = min(chunk, m - a)
        h = hidden[:, first_target - 1 + a : first_target - 1 + a + c]  # (1, c, hidden)
        logits = head_logits(model, h)[0]  # (c, vocab) — the only vocab-sized tensor
        out[a : a + c] = F.cross_entropy(logits, targets[a : a + c], reduction="none")
    return out.cpu()


def sliding_nll(model: torch.nn.Module, ids: torch.Tensor, window: int, stride: int, chunk: int = 1024) -> torch.Tensor:
    """Every token of ``ids`` after the first scored once, windows of ``window`` tokens advancing by
    ``stride`` (the HF perplexity guide's protocol): each window scores only the tokens the
    previous one did not, with all the context before them in the window.

    Returns (n - 1,) float32 NLLs.
    """
    n = ids.shape[0]
    parts, scored_to = [], 1  # positions [1, scored_to) are done
    begin = 0
    while scored_to < n:
        end = min(begin + window, n)
        first = max(scored_to, begin + 1) - begin  # first target inside this window
        parts.append(token_nll(model, ids[begin:end], first_target=first, chunk=chunk))
        scored_to = end
        begin += stride
    return torch.cat(parts)
