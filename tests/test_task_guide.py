"""docs/writing-a-task.md is a reference: every field of the protocol's types and every helper's
parameters it lists are the code's."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from ctxbench.tasks import base, common

GUIDE = (Path(__file__).parent.parent / "docs" / "writing-a-task.md").read_text()


@pytest.mark.parametrize("cls", [base.Task, base.Option, base.Cell, base.Measurement, base.Context, base.CostItem])
def test_the_guide_names_every_field_of_each_protocol_type(cls):
    section = GUIDE.split(f"**`{cls.__name__}`**", 1)[1].split("\n\n", 1)[0]
    missing = [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in section and f"`{f.name}(" not in section]
    assert not missing, f"{cls.__name__}: {missing}"


@pytest.mark.parametrize("name", ["factors_for", "shared_prefix_forwards", "parse_positive_int", "parse_choice", "parse_bool",
                                  "depths_option", "accuracy_rows", "answer_cells"])  # fmt: skip
def test_each_helper_in_the_guide_exists_with_the_parameters_it_shows(name):
    reference = GUIDE.split("## Reference", 1)[1]
    shown = re.search(rf"`{name}\(([^)]*)\)", reference)
    assert shown, name
    documented = [p.strip().split("=")[0].lstrip("*") for p in shown.group(1).split(",") if p.strip()]
    actual = [p.name for p in inspect.signature(getattr(common, name)).parameters.values()]
    assert documented == actual, (name, documented, actual)


def test_the_guide_states_the_decoding_signature():
    from ctxbench.model.decoding import decode_shared

    params = list(inspect.signature(decode_shared).parameters)
    assert "decode_shared(model, prompts, max_new_tokens, eos, budget=CACHE_BUDGET,\nfinished=None, share=True, continuations=None, think=None)" in GUIDE
    assert params == ["model", "prompts", "max_new_tokens", "eos", "budget", "finished", "share", "continuations", "think"]
