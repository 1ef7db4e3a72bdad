"""``ctxbench sweep --dry-run``: the runner's checks, run once, come before anything is shown; the
table per task and method, then the runner's plan lines, follow only when they pass."""

from __future__ import annotations

from helpers import cli_main, one_error_line


def test_a_dry_run_the_run_would_refuse_prints_its_error_line_and_no_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / "missing"
    code, out, err = cli_main(["sweep", "quick", "--dry-run", "--out", str(missing / "r.csv")], monkeypatch, capsys)
    one_error_line(code, err, ["output directory", str(missing), "does not exist"])
    assert out == ""  # not half a table above the error
    assert not missing.exists()


def test_a_dry_run_shows_the_table_per_task_and_method_then_the_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    out_file = tmp_path / "r.csv"
    code, out, err = cli_main(["sweep", "quick", "--dry-run", "--out", str(out_file)], monkeypatch, capsys)
    assert (code, err) == (0, "")
    assert out.index("quick: smollm2-135m ->") < out.index("┃ task") < out.index("plan ppl:") < out.index("plan passkey:")
    assert out.count("┃ task") == 1 and out.count("plan ppl:") == 1  # one table, one plan
    assert not out_file.exists()  # a dry run writes nothing
