"""Built-in suites by name (issue 38 item 4), in-process: ``ctxbench sweep nightly`` from any folder,
an unknown name is one line with the closest built-in, ``ctxbench suites`` lists them, paths keep
working, and ``tasks/*.toml`` in a checkout are the package's files. The wheel itself is built and
installed by ``test_suites_packaged.py``."""

from __future__ import annotations

import signal
import sys

import pytest
from helpers import ROOT
from typer.testing import CliRunner

import ctxbench
import ctxbench.api
from ctxbench.cli import app, main
from ctxbench.errors import UserError
from ctxbench.runner.suite import SUITES, builtin_suites, describe, load_suite

NAMES = ["nightly", "quick", "yarn-paper"]


def _cli(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def _main(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """The installed command's path (``main``: user errors -> one line, exit 2), in-process."""
    monkeypatch.setattr(sys, "argv", ["ctxbench", *args])
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # main's SIGTERM handler stays out of pytest
    with pytest.raises(SystemExit) as info:
        main()
        sys.exit(0)
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def test_the_built_in_suites_are_the_package_files_and_tasks_links_to_them():
    assert list(builtin_suites()) == NAMES
    assert all(path.parent == SUITES and path.parts[-3:-1] == ("ctxbench", "suites") for path in builtin_suites().values())
    links = sorted((ROOT / "tasks").glob("*.toml"))
    assert [p.stem for p in links] == NAMES  # a suite added to the package gets its tasks/ link too
    for link in links:
        assert link.is_symlink() and link.resolve() == (SUITES / link.name).resolve()


@pytest.mark.parametrize("name", NAMES)
def test_a_name_loads_what_the_checkout_path_loads_with_out_relative_to_the_working_folder(name, tmp_path, monkeypatch):
    by_path = load_suite(ROOT / "tasks" / f"{name}.toml")
    monkeypatch.chdir(tmp_path)  # any folder
    by_name = load_suite(name)
    assert by_name.jobs == by_path.jobs and by_name.model == by_path.model
    with pytest.raises(UserError) as info:  # a suffix makes it a path (issue 45): not there, so not found, pointing at the name
        load_suite(f"{name}.toml")
    assert f"suite file '{name}.toml' not found" in info.value.what and f"`ctxbench sweep {name}`" in info.value.fix
    assert by_name.out == by_path.out == f"results/{name}.csv"  # relative, as it was: not moved next to the file
    assert describe(by_name) and by_name.description == describe(by_name)


def test_sweep_by_name_plans_from_an_empty_folder_and_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _cli("sweep", "nightly", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "nightly: smollm2-135m -> results/nightly.csv" in result.output
    assert "plan ppl" in result.output and "plan passkey" in result.output and "plan niah" in result.output
    assert list(tmp_path.iterdir()) == []  # a dry run makes no results folder


def test_a_path_still_works(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = _cli("sweep", "tasks/quick.toml", "--dry-run", "--out", str(tmp_path / "q.csv"))
    assert result.exit_code == 0, result.output
    assert "tasks/quick.toml: smollm2-135m" in result.output and "plan passkey" in result.output
    mine = tmp_path / "nightly"  # a file named like a built-in suite: the file wins
    mine.write_text('[[methods]]\nname = "ntk"\n[ppl]\nfactors = [3]\nlengths = ["1k"]\n')
    monkeypatch.chdir(tmp_path)
    result = _cli("sweep", "nightly", "--dry-run", "--out", "o.csv")
    assert result.exit_code == 0, result.output
    assert "ntk x3" in result.output and "passkey" not in result.output


def test_an_unknown_name_is_one_line_naming_the_closest_built_in(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(monkeypatch, capsys, "sweep", "nighty", "--dry-run")
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert "unknown suite 'nighty'" in err and "did you mean 'nightly'?" in err
    assert "nightly, quick, yarn-paper" in err and "ctxbench suites" in err


def test_a_missing_checkout_path_points_at_the_built_in_of_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside a checkout, as after a wheel install
    with pytest.raises(UserError) as info:
        load_suite("tasks/quick.toml")
    assert "suite file 'tasks/quick.toml' not found" in info.value.what
    assert "`ctxbench sweep quick`" in info.value.fix


def test_suites_lists_each_built_in_with_its_jobs_and_description():
    result = CliRunner().invoke(app, ["suites"], terminal_width=300)
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 2}
    assert sorted(rows) == NAMES
    for name in NAMES:
        spec = load_suite(builtin_suites()[name])
        cells = [c.strip() for c in rows[name].split("│")[1:-1]]
        assert cells[1] == str(len(spec.jobs)) and cells[2] == ", ".join(j.task.name for j in spec.jobs)
        assert cells[5] == spec.description


def test_suites_name_prints_the_toml_and_an_unknown_one_suggests(tmp_path):
    result = _cli("suites", "quick")
    assert result.exit_code == 0 and result.output == (SUITES / "quick.toml").read_text()
    (tmp_path / "mine.toml").write_text(result.output)  # a start for a suite of one's own
    assert load_suite(tmp_path / "mine.toml").jobs == load_suite("quick").jobs
    bad = _cli("suites", "quik")
    assert isinstance(bad.exception, UserError) and "did you mean 'quick'?" in bad.exception.line()


def test_errors_no_longer_point_at_a_checkout_path(tmp_path):
    (tmp_path / "broken.toml").write_text("[ppl\n")
    with pytest.raises(UserError) as info:
        load_suite(tmp_path / "broken.toml")
    assert "tasks/" not in info.value.line() and "`ctxbench suites quick`" in info.value.fix
    (tmp_path / "d.toml").write_text('description = 3\n[ppl]\nlengths = ["1k"]\n')
    with pytest.raises(UserError, match="description = 3 is an integer, not text"):
        load_suite(tmp_path / "d.toml")


def test_the_python_api_sweeps_by_name_into_the_suites_out_folder(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(ctxbench.api, "execute", lambda jobs, model, out, *a, **k: seen.update(jobs=jobs, out=out) or
                        type("Outcome", (), {"records": []})())  # fmt: skip
    monkeypatch.chdir(tmp_path)
    frame = ctxbench.sweep("nightly", model=object())
    assert [j.task.name for j in seen["jobs"]] == ["ppl", "passkey", "niah"] and frame.empty
    assert seen["out"] == "results/nightly.csv" and (tmp_path / "results").is_dir()  # a run makes the suite's folder
