"""Every task's declared reference modes (``Task.references``): each names a real option value, the
one marked default is the settings' default, and the docs print the table generated from them (a
page whose copy is stale fails here, without running cog)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxbench.tasks import registry
from ctxbench.tasks.base import reference_table

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("docs/real-data.md", "docs/tasks.md")
WITH_REFERENCES = sorted(name for name, task in registry().items() if task.references)


def test_the_real_data_tasks_declare_their_references():
    assert {"longbench2", "babilong", "qa", "kv-retrieval", "number-string"} <= set(WITH_REFERENCES)


@pytest.mark.parametrize("name", WITH_REFERENCES)
def test_each_reference_mode_is_an_option_value_and_the_default_is_the_settings(name):
    task = registry()[name]
    options = {o.name: o for o in task.options}
    defaults = task._defaults()
    for ref in task.references:
        if not ref.option:
            assert len(task.references) == 1 and ref.default
            continue
        assert options[ref.option].identity and options[ref.option].parse(ref.value) == ref.value  # a value the option takes, in the cell key
        assert ref.default == (defaults[ref.option] == ref.value), (ref.option, ref.value)
    assert sum(r.default for r in task.references) == 1


@pytest.mark.parametrize("name", WITH_REFERENCES)
def test_the_docs_print_the_table_generated_from_the_declared_modes(name):
    table = reference_table(registry()[name])
    assert any(table in (ROOT / page).read_text() for page in PAGES), (
        f"the docs' reference table of {name} is stale: run .venv/bin/cog -I scripts -r {' '.join(PAGES)}")


@pytest.mark.parametrize("name", [n for n in WITH_REFERENCES if any(r.option for r in registry()[n].references)])
def test_two_modes_never_pair(name):
    """The mode is in ``options``, which every key compare, the pivot and resume use holds."""
    from ctxbench.results.identity import cell_key, table_view_key

    task = registry()[name]
    rows = []
    for ref in task.references:
        options = {**task.default_identity(), ref.option: ref.value}
        rows.append({"task": name, "options": json.dumps(options, sort_keys=True), "length": "1024", "method": "none"})
    assert len({table_view_key(r, registry()) for r in rows}) == len({cell_key(r) for r in rows}) == len(rows)
