"""Per-token negative log-likelihood from hidden states, in chunks.

A 16k-token window of a 49k-vocabulary model would need a 3 GB fp32 logits tensor; scoring
from the final hidden states ``chunk`` positions at a time keeps it at ``chunk x vocab``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The model without its LM head (``model.model`` for Llama-style models)."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    return base if base is not None else cast("PreTrainedModel", model).get_decoder()


def head_logits(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """fp32 logits for ``hidden`` (batch, n, hidden_size) -> (batch, n, vocab), with the model's
    logit scale / final soft-capping where its config has one."""
    logits = cast("PreTrainedModel", model).get_output_embeddings()(hidden).float()
    scale = getattr(model.config, "logit_scale", None)
    if isinstance(scale, (int, float)) and scale != 1:
        logits = logits * scale
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


@torch.inference_mode()
def final_hidden(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The decoder's last hidden states of ``ids`` (n,): (1, n, hidden), on the model's device."""
    device = next(model.parameters()).device
    ids = ids.to(device=device, dtype=torch.long)[None]  # (1, n)
    return decoder(model)(input_ids=ids, use_cache=False).last_hidden_state  # (1, n, hidden)


@torch.inference_mode()
def nll_from_hidden(model: torch.nn.Module, hidden: torch.Tensor, ids: torch.Tensor, first_target: int = 1, chunk: int = 1024) -> torch.Tensor:
    """NLL of ``ids[first_target:]`` from the hidden states ``hidden`` (1, n, hidden) of ``ids`` (n,),
    the LM head applied ``chunk`` positions at a time. Returns (n - first_target,) float32 nats."""
    device = hidden.device
    targets = ids.to(device=device, dtype=torch.long)[first_target:]  # (m,)
    out = torch.empty(targets.shape[0], dtype=torch.float32, device=device)
    m = targets.shape[0]
    for a in range(0, m, chunk):
        c = min(chunk, m - a)
        h = hidden[:, first_target - 1 + a : first_target - 1 + a + c]  # (1, c, hidden)
        logits = head_logits(model, h)[0]  # (c, vocab) — the only vocab-sized tensor
        out[a : a + c] = F.cross_entropy(logits, targets[a : a + c], reduction="none")
    return out.cpu()


@torch.inference_mode()
def token_nll(model: torch.nn.Module, ids: torch.Tensor, first_target: int = 1, chunk: int = 1024) -> torch.Tensor:
    """NLL of ``ids[first_target:]`` given everything before it, in one forward over ``ids``.

    ids: (n,) token ids. Returns (n - first_target,) float32 NLLs in nats.
    """
    return nll_from_hidden(model, final_hidden(model, ids), ids, first_target, chunk)


@torch.inference_mode()
def kl_from_hidden(model: torch.nn.Module, ref_hidden: torch.Tensor, hidden: torch.Tensor, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position ``t`` of two runs' hidden states (1, m, hidden) each: ``KL(P_ref,t || P_t) =
    sum_v P_ref,t(v) (log P_ref,t(v) - log P_t(v))`` in nats (llama.cpp's ``--kl-divergence``, with
    the reference as its base model), and whether the two distributions' top tokens agree. The LM
    head runs ``chunk`` positions at a time, so at most two (chunk, vocab) fp32 tensors exist.

    Returns ((m,) float32 KL, (m,) bool same top token), on the CPU.
    """
    m = hidden.shape[1]
    kl = torch.empty(m, dtype=torch.float32)
    same = torch.empty(m, dtype=torch.bool)
    for a in range(0, m, chunk):
        ref = torch.log_softmax(head_logits(model, ref_hidden[:, a : a + chunk].to(hidden.device))[0], dim=-1)  # (c, vocab)
        new = torch.log_softmax(head_logits(model, hidden[:, a : a + chunk])[0], dim=-1)  # (c, vocab)
        kl[a : a + chunk] = (ref.exp() * (ref - new)).sum(dim=-1).cpu()
        same[a : a + chunk] = (ref.argmax(dim=-1) == new.argmax(dim=-1)).cpu()
    return kl, same


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
