"""Ms-PoE (Zhang et al., NeurIPS 2024, arXiv 2403.04797) against the authors' code, VITA-Group/Ms-PoE at
commit a46c3d1 (``tests/reference/mspoe_vita.py``, a transcription of ``utils/modify_arch/llama.py``).

* ctxbench's ``ms-poe`` with ``keys=group-first`` gives the logits of the authors'
  ``MsPoELlamaForCausalLM`` on a tiny random Llama to float32 tolerance (1e-5), within the trained
  length and at four times it, with grouped and with one key head per query head, for their
  defaults (ratios 1.2..1.8, every layer but the first two), their rotary class's defaults (1..3),
  every layer, and their ``head_type normal``.
* With ``keys=per-head`` (the default) a grouped-query model gives what the authors' code gives on
  the same model with each key head copied to every query head of its group (one key head per query
  head, where their code and the paper's formula agree), in a forward and in decoding; with one key
  head per query head the two choices are the same.
* Decoding with a KV cache is theirs: the head order of each layer comes from the prefill (the
  prompt's last query) and is kept for every later step, so a decoding step equals a full forward
  in which the order is pinned to the prefill's, not one that computes the order anew.
* A prefill in two chunks (the second on the first's cache, its queries split into blocks) is
  what the authors' module gives for the same two calls.
* The order's statistic reads one query row (memory linear in length) and equals the last row of
  the authors' full attention matrix.
* ctxbench's prefix sharing is off for it (passkey, RULER, answer NLL, ppl's shared pass): every
  output depends on the whole input.
* Defaults, bad values (one clear error; exit 2 from the CLI), export refusals.
"""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import tiny_llama as conftest_tiny_llama
from reference import mspoe_vita

from ctxbench.errors import UserError
from ctxbench.methods import attention, effective_params, resolve
from ctxbench.methods.export import export
from ctxbench.methods.patching import applied
from ctxbench.model.decoding import decode_shared, greedy, score_shared, with_cache
from ctxbench.model.geometry import RopeGeometry

TRAINED = 64
N = 4 * TRAINED  # past the trained length
VOCAB = 97
LAYERS = 3

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny matmuls on one thread


def tiny_llama(kv_heads: int = 2):
    """3 layers (so the authors' default, every layer but the first two, leaves one), 4 query heads,
    head dim 16; weights large enough that positions change the logits by O(1)."""
    return conftest_tiny_llama(num_hidden_layers=LAYERS, num_key_value_heads=kv_heads, vocab_size=VOCAB, initializer_range=0.1,
                               bos_token_id=None, eos_token_id=None, pad_token_id=None)  # fmt: skip


def geometry(model) -> RopeGeometry:
    return RopeGeometry.from_config(model.config)


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def authors_logits(model, ids, layers, ratio_min=1.2, ratio_max=1.8, head_type=None) -> torch.Tensor:
    with mspoe_vita.installed(model, layers, ratio_min, ratio_max, head_type):
        mspoe_vita.reset(model)
        return logits(model, ids)


def patched_logits(model, ids, params=None, spec="ms-poe") -> torch.Tensor:
    with applied(model, geometry(model), resolve(spec, params), 1.0, ids.shape[1]):
        return logits(model, ids)


def max_diff(a, b) -> float:
    return (a - b).abs().max().item()


def sequence(n: int = N, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def key_heads_copied(model):
    """The same model with one key head per query head: each key and value head's projection copied
    to every query head of its group, so every query head reads the keys it read before."""
    cfg = model.config
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    wide = tiny_llama(heads)
    state = {}
    for name, w in model.state_dict().items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):  # (kv * head_dim, hidden) -> (heads * head_dim, hidden)
            w = w.view(kv, -1, w.shape[-1]).repeat_interleave(heads // kv, dim=0).reshape(-1, w.shape[-1])
        state[name] = w
    wide.load_state_dict(state)
    return wide


# the authors' code rotates a key head with its group's first query head's ratio
AUTHORS = {"keys": "group-first"}

# (ctxbench params, the authors' apply_layers, ratio_min, ratio_max, head_type)
CASES = [
    ({}, range(2, LAYERS), 1.2, 1.8, None),  # their defaults
    ({"first_layer": 0}, range(LAYERS), 1.2, 1.8, None),
    ({"first_layer": 1, "ratio_min": 1.0, "ratio_max": 3.0}, range(1, LAYERS), 1.0, 3.0, None),  # their rotary class's defaults
    ({"first_layer": 0, "head_order": "reversed"}, range(LAYERS), 1.2, 1.8, "normal"),
]


@pytest.mark.parametrize("n", [TRAINED, N])
@pytest.mark.parametrize("kv_heads", [2, 4])
@pytest.mark.parametrize("params,layers,lo,hi,head_type", CASES)
def test_logits_equal_the_authors_code(params, layers, lo, hi, head_type, kv_heads, n):
    model = tiny_llama(kv_heads)
    ids = sequence(n)
    want = authors_logits(model, ids, layers, lo, hi, head_type)
    got = patched_logits(model, ids, {**params, **AUTHORS})
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"
    assert max_diff(want, logits(model, ids)) > 1e-2  # Ms-PoE changes these logits


@pytest.mark.parametrize("n", [TRAINED, N])
@pytest.mark.parametrize("params,layers,lo,hi,head_type", CASES)
def test_per_head_keys_are_the_authors_code_with_each_key_head_copied_to_its_query_heads(params, layers, lo, hi, head_type, n):
    model = tiny_llama(kv_heads=2)
    ids = sequence(n)
    wide = key_heads_copied(model)
    assert max_diff(logits(wide, ids), logits(model, ids)) <= 1e-5  # the copy is the same model
    want = authors_logits(wide, ids, layers, lo, hi, head_type)
    got = patched_logits(model, ids, params)
    assert max_diff(got, want) <= 1e-5, f"max abs diff {max_diff(got, want):.3g}"


def test_the_keys_choice_matters_on_a_grouped_query_model_only():
    ids = sequence()
    grouped, wide = tiny_llama(kv_heads=2), tiny_llama(kv_heads=4)
    assert max_diff(patched_logits(grouped, ids, AUTHORS), patched_logits(grouped, ids)) > 1e-2
    assert max_diff(patched_logits(wide, ids, AUTHORS), patched_logits(wide, ids)) <= 1e-6


def test_the_head_order_matters_on_this_model():
    """Reversing which head takes which ratio (or giving every head one order) changes the logits,
    so the equality above checks the order too."""
    model = tiny_llama()
    ids = sequence()
    outlier = patched_logits(model, ids, {"first_layer": 0})
    assert max_diff(outlier, patched_logits(model, ids, {"first_layer": 0, "head_order": "reversed"})) > 1e-2


def test_default_parameters_are_the_authors():
    setting = resolve("ms-poe")
    assert effective_params(setting, RopeGeometry(16, 16, 1e4, 4096), 1.0) == {
        "ratio_min": 1.2, "ratio_max": 1.8, "first_layer": 2, "head_order": "outlier", "keys": "per-head"}  # fmt: skip
    assert not setting.uses_factor and setting.head_scaled and not setting.causal
    assert resolve("mspoe").name == "ms-poe"


def test_a_frequency_method_combines_with_it_and_gives_its_frequencies():
    """``ntk+ms-poe``: each head's positions divided by its ratio, under NTK's frequencies; at
    ratios of 1 (min 1, max 1 + tiny) the heads are (almost) plain NTK."""
    model = tiny_llama()
    ids = sequence()
    with applied(model, geometry(model), resolve("ntk"), 4.0, N):
        ntk = logits(model, ids)
    with applied(model, geometry(model), resolve("ntk+ms-poe", {"ratio_min": 1.0, "ratio_max": 1.000001}), 4.0, N):
        near = logits(model, ids)
    assert max_diff(near, ntk) <= 1e-3
    assert max_diff(patched_logits(model, ids, spec="ntk+ms-poe"), ntk) > 1e-2


# --- decoding with a KV cache ------------------------------------------------------------------


def authors_decoding(model, prompt, new_tokens, layers) -> tuple[list[torch.Tensor], list]:
    """The authors' generation: one prefill (the order computed), then one token per step on the
    cache (the order kept), greedy. Positions are passed explicitly: their layers keep their own cache."""
    from transformers import DynamicCache

    steps, orders = [], []
    with mspoe_vita.installed(model, layers), torch.no_grad():
        mspoe_vita.reset(model)
        cache, n = DynamicCache(), prompt.shape[1]
        out = model(prompt, position_ids=torch.arange(n)[None], **with_cache(model, cache), use_cache=True).logits[0, -1]
        orders = [layer.self_attn.head_order.clone() for i, layer in enumerate(model.model.layers) if i in layers]
        for step in range(new_tokens):
            steps.append(out)
            token = out.argmax().view(1, 1)
            pos = torch.tensor([[n + step]])
            out = model(token, position_ids=pos, **with_cache(model, cache), use_cache=True).logits[0, -1]
    return steps, orders


def pinned_full_forward(model, seq, layers, orders) -> torch.Tensor:
    """The authors' model on the whole sequence with no cache and the head orders pinned to ``orders``
    (their ``enable_head_metrics`` off): what a decoding step computes."""
    with mspoe_vita.installed(model, layers), torch.no_grad():
        mspoe_vita.reset(model)
        for i, order in zip(layers, orders, strict=True):
            model.model.layers[i].self_attn.head_order = order
            model.model.layers[i].self_attn.enable_head_metrics = False
        return model(seq, use_cache=False).logits[0, -1]


@pytest.mark.parametrize("keys", ["group-first", "per-head"])
@pytest.mark.parametrize("first_layer", [0, 2])
def test_kv_cache_decoding_is_the_authors_decoding_with_the_prefill_order(first_layer, keys):
    """Against the authors' decoding of the model itself (``group-first``) or of its copy with one
    key head per query head (``per-head``)."""
    model = tiny_llama()
    reference = model if keys == "group-first" else key_heads_copied(model)
    ids, new = sequence(), 8
    prompt = ids[:, : N - new]
    layers = range(first_layer, LAYERS)
    want, orders = authors_decoding(reference, prompt, new, layers)
    setting = resolve("ms-poe", {"first_layer": first_layer, "keys": keys})
    with applied(model, geometry(model), setting, 1.0, N), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
        kept = [model.model.layers[i].self_attn._ctxbench_plan.memo["order"][0] for i in layers]
    assert [o.tolist() for o in kept] == [o.tolist() for o in orders]  # the prefill's order, kept
    fresh = []
    for step in range(new):
        assert max_diff(out.logits[step][0], want[step]) <= 1e-5, step
        # a decoding step is a full forward with the order pinned to the prefill's
        seq = out.sequences[:, : N - new + step]
        assert max_diff(out.logits[step][0], pinned_full_forward(reference, seq, layers, orders)) <= 1e-5, step
        fresh.append(max_diff(out.logits[step][0], authors_logits(reference, seq, layers)[0, -1]))
    # not a full forward that computes the order anew at each step's last token: that one differs
    assert fresh[0] <= 1e-5 and max(fresh) > 1e-3, fresh


def test_with_an_input_independent_order_decoding_equals_full_forwards():
    """``head_order=reversed`` (the authors' ``head_type normal``) depends on no statistic: there the
    authors' decoding and a full forward of the grown sequence agree, as for any causal method."""
    model = tiny_llama()
    ids, new = sequence(), 6
    prompt = ids[:, : N - new]
    with applied(model, geometry(model), resolve("ms-poe", {"first_layer": 0, "head_order": "reversed"}), 1.0, N), torch.no_grad():
        out = model.generate(prompt, max_new_tokens=new, do_sample=False, pad_token_id=0,
                             return_dict_in_generate=True, output_logits=True)  # fmt: skip
        for step in range(new):
            full = model(out.sequences[:, : N - new + step], use_cache=False).logits[0, -1]
            assert max_diff(out.logits[step][0], full) <= 1e-5


def authors_chunks(model, ids, cut, layers) -> torch.Tensor:
    """The authors' module called twice, ``ids[:cut]`` then the rest on its cache (the order from the first call)."""
    from transformers import DynamicCache

    with mspoe_vita.installed(model, layers), torch.no_grad():
        mspoe_vita.reset(model)
        cache = DynamicCache()
        first = model(ids[:, :cut], position_ids=torch.arange(cut)[None], **with_cache(model, cache), use_cache=True).logits
        rest = model(ids[:, cut:], position_ids=torch.arange(cut, ids.shape[1])[None], **with_cache(model, cache),
                     use_cache=True).logits  # fmt: skip
    return torch.cat([first, rest], dim=1)


def test_a_prefill_in_chunks_in_blocks_of_queries_is_the_authors_same_two_calls(monkeypatch):
    """156 queries after a 100-token cache go through the blocked path; in blocks of 20 queries
    they give what one block gives and what the authors' two calls give."""
    model = tiny_llama()
    ids = sequence()
    setting = resolve("ms-poe", {"first_layer": 0, **AUTHORS})
    want = authors_chunks(model, ids, 100, range(LAYERS))

    def chunked():
        with applied(model, geometry(model), setting, 1.0, N), torch.no_grad():
            first = model(ids[:, :100], use_cache=True)
            rest = model(ids[:, 100:], **with_cache(model, first.past_key_values), use_cache=True).logits
        return torch.cat([first.logits, rest], dim=1)

    whole = chunked()
    steps = []
    block_size = attention._block_size
    monkeypatch.setattr(attention, "_block_size", lambda h, k: steps.append(block_size(h, k)) or steps[-1])
    monkeypatch.setattr(attention, "SCORE_BUDGET", 4 * N * 20)  # blocks of 20 queries
    blocked = chunked()
    assert steps and max(steps) == 20
    assert max_diff(blocked, whole) <= 1e-5
    assert max_diff(blocked, want) <= 1e-5
    # the order comes from the first chunk's last token: not the whole prefill's
    assert max_diff(want, authors_logits(model, ids, range(LAYERS))) > 1e-3


def test_the_statistic_reads_one_query_row_equal_to_the_authors_full_matrix():
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 300, 16), torch.randn(1, 2, 300, 16)
    got = attention._last_query_attention(q, k, 16**-0.5)
    assert got.shape == (1, 4, 300)
    full = torch.softmax(torch.matmul(q, k.repeat_interleave(2, dim=1).transpose(2, 3)) / 4.0, dim=-1)[:, :, -1]
    assert max_diff(got, full) <= 1e-7


def test_a_cache_continued_without_its_prefill_is_an_error():
    model = tiny_llama()
    ids = sequence(40)
    first = model(ids[:, :20], use_cache=True)  # built without the method
    with applied(model, geometry(model), resolve("ms-poe", {"first_layer": 0}), 1.0, 40), torch.no_grad():
        with pytest.raises(RuntimeError, match="prefill it did not see"):
            model(ids[:, 20:], **with_cache(model, first.past_key_values), use_cache=True)


# --- no shared prefixes: every output depends on the whole input -----------------------------------


def stepwise_nll(model, prompt, cont) -> torch.Tensor:
    """NLL of ``cont`` after ``prompt`` as decoding feeds it: the prompt prefilled whole, then one
    continuation token per step on its cache."""
    from transformers import DynamicCache

    cache, out = DynamicCache(), []
    with torch.no_grad():
        logits = model(torch.tensor([prompt]), **with_cache(model, cache), use_cache=True).logits[0, -1]
        for token in cont:
            out.append(-torch.log_softmax(logits, -1)[token])
            logits = model(torch.tensor([[token]]), **with_cache(model, cache), use_cache=True).logits[0, -1]
    return torch.stack(out)


def test_answers_and_answer_nlls_prefill_each_prompt_whole():
    """Prompts sharing a long prefix: with ``share=False`` (what the tasks pass for ms-poe, which is not
    causal) each is answered and scored as decoding it alone gives; sharing the prefix's cache would not."""
    model = tiny_llama()
    base = sequence(120)[0].tolist()
    prompts = [base + [5, 6, 7], base + [8, 9], base[:100] + [1, 2, 3]]
    conts = [[3, 4, 5], [6], [7, 8]]
    with applied(model, geometry(model), resolve("ms-poe", {"first_layer": 0}), 1.0, N):
        alone = [greedy(model, torch.tensor([p]), 4, None)[0] for p in prompts]
        got = {a.index: list(a.tokens) for a in decode_shared(model, prompts, 4, None, share=False)}
        assert [got[i] for i in range(3)] == alone
        nll = {s.index: s.nll for s in score_shared(model, prompts, conts, share=False)}
        for i, (p, c) in enumerate(zip(prompts, conts, strict=True)):
            assert max_diff(nll[i], stepwise_nll(model, p, c)) <= 1e-5, i
        shared = {s.index: s.nll for s in score_shared(model, prompts, conts)}
    assert max(max_diff(nll[i], shared[i]) for i in range(3)) > 1e-4  # a shared prefix's order is not the prompt's


def test_ppl_runs_each_length_of_ms_poe_in_its_own_forward():
    from ctxbench.tasks import ppl
    from ctxbench.tasks.base import Cell

    def cells(spec):
        return [Cell("ppl", resolve(spec), None, n, stride=n) for n in (32, 64)]

    assert len(ppl.groups(cells("ms-poe"), None)) == 2
    assert len(ppl.groups(cells("yarn"), None)) == 1


# --- parameters and exports ---------------------------------------------------------------------


@pytest.mark.parametrize("params,words", [
    ({"ratio_min": 0.5}, ["ms-poe parameter ratio_min", "0.5 must be >= 1", "compress_ratio_min"]),
    ({"ratio_max": 1.1}, ["ms-poe needs ratio_max > ratio_min", "ratio_max=1.1"]),
    ({"ratio_min": 2, "ratio_max": 2}, ["ms-poe needs ratio_max > ratio_min"]),
    ({"ratio_max": "abc"}, ["ms-poe parameter ratio_max", "'abc' is not a number"]),
    ({"first_layer": -1}, ["ms-poe parameter first_layer", "-1 must be >= 0", "apply_layers"]),
    ({"first_layer": 1.5}, ["ms-poe parameter first_layer", "1.5 is not a whole number"]),
    ({"head_order": "normal"}, ["ms-poe parameter head_order", "'normal' is not one of the choices", "outlier"]),
    ({"keys": "first"}, ["ms-poe parameter keys", "'first' is not one of the choices", "group-first"]),
    ({"factor": 2}, ["unknown parameter 'factor' for method 'ms-poe'"]),
])  # fmt: skip
def test_bad_values_are_one_clear_error(params, words):
    with pytest.raises(UserError) as info:
        resolve("ms-poe", params)
    line = info.value.line()
    assert "\n" not in line and " — " in line and all(w in line for w in words), line


def test_a_first_layer_past_the_model_is_one_clear_error():
    model = tiny_llama()
    with pytest.raises(UserError) as info, applied(model, geometry(model), resolve("ms-poe", {"first_layer": 3}), 1.0, 64):
        pass
    line = info.value.line()
    assert "ms-poe first_layer=3 leaves no layer of this 3-layer model" in line and "first_layer=N with 0 <= N < 3" in line
    assert not any(hasattr(m, "_ctxbench_plan") for m in model.modules())


def test_the_cli_exits_2_with_one_line(monkeypatch, capsys):
    from ctxbench.cli import main

    argv = ["ctxbench", "export", "--method", "ms-poe", "--to", "json", "--param", "ratio_min=0.5",
            "--head-dim", "64", "--base", "1e4", "--trained-len", "4k"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        main()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert info.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: bad value for ms-poe parameter ratio_min: 0.5 must be >= 1") and " — " in err[0], err


@pytest.mark.parametrize("engine", ["transformers", "vllm", "llamacpp"])
def test_no_engine_exports_it(engine):
    with pytest.raises(UserError) as info:
        export("ms-poe", 1.0, engine, head_dim=16, base=1e4, trained_len=64)
    line = info.value.line()
    assert f"{engine} cannot express method 'ms-poe'" in line and "per-head positions" in line and "\n" not in line
    assert '"ratio_min": 1.2' in export("ms-poe", 1.0, "json", head_dim=16, base=1e4, trained_len=64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_logits_are_the_authors(dtype=torch.float32, atol=1e-4):
    """The same path on a GPU (SDPA's kernels, the order sorted on the device) against the
    authors' code run on the CPU, float32 (in bf16 a score near its threshold may flip the order)."""
    import copy

    model = tiny_llama()
    ids = sequence()
    want = authors_logits(model, ids, range(LAYERS))
    gpu = copy.deepcopy(model).to("cuda", dtype)
    with applied(gpu, geometry(gpu), resolve("ms-poe", {"first_layer": 0, **AUTHORS}), 1.0, N):
        got = logits(gpu, ids.cuda()).float().cpu()
    assert max_diff(got, want) <= atol, f"max abs diff {max_diff(got, want):.3g}"
