"""The objective is ctxbench's own numbers: the NLL past L is the ppl task's ``nll_beyond_L`` of the
same document, the guard is the NLL of an L/2 window, methods switch in place on one loaded model."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import TRAINED

from ctxbench.methods import resolve
from ctxbench.tune.objective import ModelObjective, blocks, make_needle, parse_objective

pytestmark = pytest.mark.usefixtures("one_thread")
T = 2 * TRAINED


def _docs(n=2, length=T + 8):
    g = torch.Generator().manual_seed(0)
    return {f"d{i}": torch.randint(0, 256, (length,), generator=g, dtype=torch.int32) for i in range(n)}


def test_nll_past_L_is_the_ppl_tasks_nll_beyond_L(tiny_lm, corpus_dir):
    import ctxbench

    df = ctxbench.run("ppl", tiny_lm, method="yarn", factor=2, length=str(T), dataset=str(corpus_dir), docs=1)
    reference = float(df[(df.metric == "nll_beyond_L") & (df.doc == "all")].value.iloc[0])
    from ctxbench.tasks.corpus import Tokenized, load_corpus

    corpus = load_corpus(str(corpus_dir))
    tokens = Tokenized(corpus, tiny_lm.tokenizer)
    first = tokens.select([T], 1)[T][0]
    objective = ModelObjective(tiny_lm, {corpus.names[first]: tokens[first]}, T)
    (value,) = objective.values(resolve("yarn"), 2.0, [corpus.names[first]])
    assert math.isclose(value.value, reference, rel_tol=1e-6)


def test_the_guard_is_the_nll_of_an_L_over_2_window(tiny_lm):
    from ctxbench.methods.patching import applied
    from ctxbench.model.scoring import token_nll

    docs = _docs(1)
    objective = ModelObjective(tiny_lm, docs, T)
    yarn = resolve("yarn")
    (value,) = objective.values(yarn, 2.0, ["d0"])
    with applied(tiny_lm.model, tiny_lm.geometry, yarn, 2.0, TRAINED // 2):
        alone = token_nll(tiny_lm.model, docs["d0"][: TRAINED // 2])
    assert math.isclose(value.guard_value, float(alone.double().mean()), rel_tol=1e-5)
    (guard_only,) = objective.values(yarn, 2.0, ["d0"], guard_only=True)
    assert guard_only.units == () and math.isclose(guard_only.guard_value, value.guard_value, rel_tol=1e-5)


def test_methods_switch_in_place_on_one_loaded_model(tiny_lm):
    """Each setting's value equals a fresh evaluation of it alone: nothing of one trial leaks into the next."""
    docs = _docs(1)
    objective = ModelObjective(tiny_lm, docs, T)
    settings = [(resolve("yarn"), 2.0), (resolve("yarn", {"beta_fast": 8.0}), 3.0), (resolve("self-extend", {"group": 4}), 2.0)]
    seen = [next(objective.values(s, f, ["d0"])).value for s, f in settings]
    again = [next(ModelObjective(tiny_lm, docs, T).values(s, f, ["d0"])).value for s, f in reversed(settings)]
    assert seen == list(reversed(again))
    assert len(set(seen)) == 3


def test_blocks_cover_the_positions_once_aligned_to_512():
    nll = torch.arange(1, 2000, dtype=torch.float32)  # the loss of token t is t
    units = blocks(nll, 700, 1800)
    assert [w for _, w in units] == [324, 512, 264]
    assert sum(s for s, _ in units) == sum(range(700, 1800))


def test_a_needle_prompt_is_the_passkey_prompt_with_the_document_as_its_filler(tiny_lm):
    """The passkey task's pieces, written out here: the instruction, the document's tokens with the
    needle line at the middle of them, the question; the answer is the key."""
    from ctxbench.tasks import passkey

    tok = tiny_lm.tokenizer
    enc = lambda text: list(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    bos = [tok.bos_token_id] if tok.bos_token_id is not None and tok("a")["input_ids"][:1] == [tok.bos_token_id] else []
    intro = bos + enc(passkey.INSTRUCTION + "\n")
    line = enc("\n" + passkey.NEEDLE_HEAD) + enc(" 1234567") + enc(passkey.NEEDLE_TAIL.format(key=1234567) + "\n")
    question = enc("\n" + passkey.QUESTION + " " + passkey.ANSWER_START)
    hay = list(range(65, 91)) * 20
    needle = make_needle(tok, hay, 300, 0.5, 1234567)
    room = 300 - len(intro) - len(line) - len(question)
    at = round(0.5 * room)
    assert list(needle.prompt) == intro + hay[:at] + line + hay[at:room] + question
    assert tok.decode(list(needle.answer)).strip() == "1234567"


def test_needle_and_both_objectives_score_answers(tiny_lm):
    long = 8 * TRAINED  # room for the passkey prompt's own text (about 250 of the byte tokenizer's tokens)
    docs = _docs(2, length=long + 64)
    needle = ModelObjective(tiny_lm, docs, long, "needle")
    assert len(needle.instances) == 10  # five depths per document
    (v,) = needle.values(resolve("yarn"), 2.0, [needle.instances[0]])
    assert len(v.units) == 1 and v.value > 0 and v.guard
    both = ModelObjective(tiny_lm, docs, long, "both")
    (b,) = both.values(resolve("yarn"), 2.0, ["d0"])
    assert math.isclose(sum(w for _, w in b.units), 1.0)


def test_an_unknown_objective_names_the_choices():
    from ctxbench.errors import UserError

    with pytest.raises(UserError, match="did you mean 'nll'"):
        parse_objective("nlll")


def test_a_needle_unit_is_the_keys_summed_nll_after_its_prompt(tiny_lm):
    """The reference: one plain forward of the prompt and the key, the key tokens' log-probabilities summed."""
    long = 8 * TRAINED
    objective = ModelObjective(tiny_lm, _docs(1, length=long + 64), long, "needle")
    name = objective.instances[2]
    (value,) = objective.values(resolve("none"), 1.0, [name])
    needle = objective.needles[name]
    with torch.no_grad():
        logits = tiny_lm.model(torch.tensor([list(needle.prompt) + list(needle.answer)])).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    start = len(needle.prompt) - 1  # the logits at position t predict token t + 1
    reference = -sum(float(logp[start + i, a]) for i, a in enumerate(needle.answer))
    (total, tokens), = value.units
    assert math.isclose(total, reference, rel_tol=1e-5) and tokens == len(needle.answer)
