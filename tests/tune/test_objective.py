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


def test_a_needle_prompt_has_the_target_length_and_its_answer_last(tiny_lm):
    hay = list(range(65, 91)) * 20
    needle = make_needle(tiny_lm.tokenizer, hay, 300, 0.5, 1234567)
    assert len(needle.prompt) <= 300
    assert tiny_lm.tokenizer.decode(list(needle.answer)).strip() == "1234567."


def test_needle_and_both_objectives_score_answers(tiny_lm):
    docs = _docs(2, length=T + 64)
    needle = ModelObjective(tiny_lm, docs, T, "needle")
    assert len(needle.instances) == 10  # five depths per document
    (v,) = needle.values(resolve("yarn"), 2.0, [needle.instances[0]])
    assert len(v.units) == 1 and v.value > 0 and v.guard
    both = ModelObjective(tiny_lm, docs, T, "both")
    (b,) = both.values(resolve("yarn"), 2.0, ["d0"])
    assert math.isclose(sum(w for _, w in b.units), 1.0)


def test_an_unknown_objective_names_the_choices():
    from ctxbench.errors import UserError

    with pytest.raises(UserError, match="did you mean 'nll'"):
        parse_objective("nlll")
