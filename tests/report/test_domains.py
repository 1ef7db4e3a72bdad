"""Metric domains (issue 37): values no run can produce -- a perplexity below 1, an accuracy above
1, a per-trial outcome that is neither 0 nor 1, a value outside its own interval, a negative NLL
or token count -- are refused by every reader (``report``, ``report --format json``, ``compare``
on either side, ``rank``, the plots) with exit 2 and one line naming the cell and the fix, and
no file is touched. The fix works when applied. Every committed results file still passes every
reader, and JSON output is strict (no bare NaN/Infinity).

Run in-process through ``ctxbench.cli.main`` (the CLI's one error path: ``UserError`` -> one line,
exit 2; typer's ``CliRunner`` on the app would hand back the exception instead); no model loads.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from helpers import RESULTS, cli_main, csv_text, read_csv

BASELINE = RESULTS / "baseline-nightly.csv"  # ppl, passkey and niah cells, with answer_nll
PROXIES = RESULTS / "proxies-smollm2-16k.csv"  # ppl cells with longppl and kl
RULER = RESULTS / "ruler-smollm2-2k.csv"  # niah, vt, cwe, fwe cells
IDENTITY_COLUMNS = ("model_digest", "data_digest", "task", "method", "label", "method_params", "factor", "length", "stride",
                    "depth", "variant", "seed", "dtype", "options", "backend")  # fmt: skip




def _cell(r: dict) -> tuple:
    return tuple(r.get(c, "") for c in IDENTITY_COLUMNS)  # a 0.1.0 file has no options column


def _agg(task: str, metric: str, label: str | None = None):
    """The first aggregate row of ``task``'s ``metric`` (of method ``label``)."""
    return lambda r: (r["task"] == task and r["metric"] == metric and r["doc"] in ("", "all") and r["trial"] in ("", "all")
                      and (label is None or r["label"] == label))  # fmt: skip


def _trial(task: str, metric: str):
    return lambda r: r["task"] == task and r["metric"] == metric and r["trial"] not in ("", "all")


def _doc(metric: str):
    return lambda r: r["task"] == "ppl" and r["metric"] == metric and r["doc"] not in ("", "all")


def _scale(factor: float, of: str | None = None):
    """A new value: the row's own (or its cell's ``of`` row's) times ``factor``."""
    return ("scale", factor, of)


# (name, file, which row, column, new value, words the message holds)
EDITS = [
    ("ppl 0.5", BASELINE, _agg("ppl", "ppl", "yarn"), "value", "0.5", "ppl 0.5 is outside [1, inf)"),
    ("ppl 0 of a document", BASELINE, _doc("ppl"), "value", "0", "ppl 0 is outside [1, inf)"),
    ("nll negative", BASELINE, _agg("ppl", "nll"), "value", "-0.1", "nll -0.1 is outside [0, inf)"),
    ("nll of a document negative", BASELINE, _doc("nll"), "value", "-3", "nll -3 is outside [0, inf)"),
    ("nll_pos negative", BASELINE, lambda r: r["metric"] == "nll_pos", "value", "-2.5", "nll_pos -2.5 is outside [0, inf)"),
    ("nll_beyond_L negative", BASELINE, _agg("ppl", "nll_beyond_L"), "value", "-1", "nll_beyond_L -1 is outside"),
    ("ppl_lo below 1", BASELINE, _agg("ppl", "ppl_lo"), "value", "0.3", "ppl_lo 0.3 is outside [1, inf)"),
    ("ppl above its own interval", BASELINE, _agg("ppl", "ppl", "yarn"), "value", _scale(1.01, "ppl_hi"), "outside its own 95% interval"),
    ("ppl below its own interval", BASELINE, _agg("ppl", "ppl", "yarn"), "value", _scale(0.99, "ppl_lo"), "outside its own 95% interval"),
    ("ppl_lo above ppl_hi", BASELINE, _agg("ppl", "ppl_lo", "yarn"), "value", _scale(1.5, "ppl_hi"), "is above ppl_hi"),
    ("docs a fraction", BASELINE, _agg("ppl", "docs"), "value", "1.5", "docs 1.5 is outside a whole number >= 0"),
    ("docs negative", BASELINE, _agg("ppl", "docs"), "value", "-1", "docs -1 is outside"),
    ("peak memory negative", BASELINE, _agg("ppl", "peak_mem_mb"), "value", "-3", "peak_mem_mb -3 is outside"),
    ("tokens per second negative", BASELINE, _agg("ppl", "tokens_per_s"), "value", "-10", "tokens_per_s -10 is outside"),
    ("passkey accuracy 1.7", BASELINE, _agg("passkey", "accuracy"), "value", "1.7", "accuracy 1.7 is outside [0, 1]"),
    ("passkey accuracy negative", BASELINE, _agg("passkey", "accuracy"), "value", "-0.25", "accuracy -0.25 is outside [0, 1]"),
    ("passkey accuracy_hi 1.3", BASELINE, _agg("passkey", "accuracy_hi"), "value", "1.3", "accuracy_hi 1.3 is outside [0, 1]"),
    ("passkey accuracy below its interval", BASELINE, _agg("passkey", "accuracy"), "value", _scale(0.5, "accuracy_lo"), "outside its own 95% interval"),
    ("passkey trial 0.5", BASELINE, _trial("passkey", "correct"), "value", "0.5", "correct 0.5 is outside {0, 1}"),
    ("passkey trial 2", BASELINE, _trial("passkey", "correct"), "value", "2", "correct 2 is outside {0, 1}"),
    ("passkey trial -1", BASELINE, _trial("passkey", "correct"), "value", "-1", "correct -1 is outside {0, 1}"),
    ("passkey answer_nll negative", BASELINE, _agg("passkey", "answer_nll"), "value", "-0.5", "answer_nll -0.5 is outside [0, inf)"),
    ("a trial's answer_nll negative", BASELINE, _trial("passkey", "correct"), "extra", '{"answer_nll": -1.5, "cell_rows": 10}', "extra.answer_nll -1.5"),
    ("niah answer_nll above its interval", BASELINE, _agg("niah", "answer_nll"), "value", _scale(1.5, "answer_nll_hi"), "outside its own 95% interval"),
    ("niah trial score 1.5", BASELINE, _trial("niah", "score"), "value", "1.5", "score 1.5 is outside [0, 1]"),
    ("niah trial score negative", BASELINE, _trial("niah", "score"), "value", "-0.25", "score -0.25 is outside [0, 1]"),
    ("niah accuracy 7 (a percent)", BASELINE, _agg("niah", "accuracy"), "value", "7", "accuracy 7 is outside [0, 1]"),
    ("tokens negative", BASELINE, _trial("passkey", "correct"), "tokens", "-5", "tokens -5 is outside a whole number >= 0"),
    ("tokens a fraction", BASELINE, _agg("ppl", "nll"), "tokens", "10.5", "tokens 10.5 is outside"),
    ("seconds negative", BASELINE, _trial("passkey", "correct"), "seconds", "-1", "seconds -1 is outside [0, inf)"),
    ("extra trials negative", BASELINE, _agg("passkey", "accuracy"), "extra", '{"cell_rows": 10, "correct": 4.0, "trials": -4}', "extra.trials -4"),
    ("extra trials a fraction", BASELINE, _agg("niah", "accuracy"), "extra", '{"cell_rows": 10, "correct": 1.0, "trials": 2.5}', "extra.trials 2.5"),
    ("longppl 0.8", PROXIES, _agg("ppl", "longppl"), "value", "0.8", "longppl 0.8 is outside [1, inf)"),
    ("longppl of a document 0.5", PROXIES, _doc("longppl"), "value", "0.5", "longppl 0.5 is outside [1, inf)"),
    ("kl negative", PROXIES, _agg("ppl", "kl"), "value", "-0.5", "kl -0.5 is outside [0, inf)"),
    ("kl_hi negative", PROXIES, _agg("ppl", "kl_hi"), "value", "-0.1", "kl_hi -0.1 is outside [0, inf)"),
    ("longppl above its interval", PROXIES, _agg("ppl", "longppl"), "value", _scale(2.0, "longppl_hi"), "outside its own 95% interval"),
    ("key tokens a fraction", PROXIES, _agg("ppl", "key_tokens"), "value", "3.5", "key_tokens 3.5 is outside a whole number >= 0"),
    ("vt trial score 1.2", RULER, _trial("vt", "score"), "value", "1.2", "score 1.2 is outside [0, 1]"),
    ("cwe accuracy 2", RULER, _agg("cwe", "accuracy"), "value", "2", "accuracy 2 is outside [0, 1]"),
    ("fwe accuracy_lo negative", RULER, _agg("fwe", "accuracy_lo"), "value", "-0.1", "accuracy_lo -0.1 is outside [0, 1]"),
    ("a plug-in's accuracy 1.5 (task not installed)", RULER, _agg("cwe", "accuracy"), "task+value", ("mytask", "1.5"), "accuracy 1.5 is outside [0, 1]"),
]  # fmt: skip


def _edited(edit) -> tuple[str, dict]:
    """The file with one row edited, and that row as edited."""
    _, path, which, column, value, _ = edit
    header, rows = read_csv(path)
    i = next(i for i, r in enumerate(rows) if which(r))
    row = dict(rows[i])
    if column == "task+value":
        cell = _cell(row)
        row["value"] = value[1]
        rows = [{**r, "task": value[0]} if _cell(r) == cell else r for r in rows]
        row["task"] = value[0]
    elif isinstance(value, tuple) and value[0] == "scale":
        _, factor, of = value
        source = row if of is None else next(r for r in rows if _cell(r) == _cell(row) and r["metric"] == of
                                             and r["doc"] == row["doc"] and r["trial"] == row["trial"])  # fmt: skip
        row[column] = repr(float(source["value"]) * factor)
    else:
        row[column] = value
    rows[i] = row
    return csv_text(header, rows), row


def _without_cell(content: str, row: dict) -> str:
    """The fix the message gives, applied: every row of the broken row's cell deleted."""
    reader = csv.DictReader(io.StringIO(content))
    header = list(reader.fieldnames)
    return csv_text(header, [r for r in reader if _cell(r) != _cell(row)])


READERS = {
    "report": lambda path, row: ["report", str(path), "--format", "markdown"],
    "report json": lambda path, row: ["report", str(path), "--format", "json"],
    "compare as NEW": lambda path, row: ["compare", str(BASELINE), str(path), "--format", "markdown"],
    "compare as BASE": lambda path, row: ["compare", str(path), str(BASELINE), "--format", "markdown"],
    "rank": lambda path, row: ["rank", str(path), "--len", row["length"]],
}


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and " — " in lines[0], err
    assert "Traceback" not in err
    return lines[0]


def _names_the_cell(line: str, row: dict) -> None:
    assert f"{row['task']}" in line and (row["label"] or row["method"]) in line and f"at length {row['length']}" in line, line
    assert "delete every row of that cell and run it again" in line, line


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("edit", EDITS, ids=[e[0] for e in EDITS])
def test_an_out_of_domain_value_is_refused_by_every_reader(tmp_path, monkeypatch, capsys, edit, reader):
    content, row = _edited(edit)
    path = tmp_path / "edited.csv"
    path.write_text(content)
    before = path.read_bytes()
    code, out, err = cli_main(READERS[reader](path, row), monkeypatch, capsys)
    assert code == 2, (out, err)
    line = _one_line(err)
    assert edit[5] in line, line
    _names_the_cell(line, row)
    if reader.startswith("compare"):
        assert f"'{path}'" in line  # the file it is in
    assert path.read_bytes() == before
    assert not out.strip()  # nothing judged, nothing printed


@pytest.mark.parametrize("edit", EDITS, ids=[e[0] for e in EDITS])
def test_the_plots_refuse_an_out_of_domain_value_before_drawing(tmp_path, edit):
    from ctxbench.errors import UserError
    from ctxbench.results.store import read_records
    from ctxbench.tasks.plots import write_plots

    content, row = _edited(edit)
    path = tmp_path / "edited.csv"
    path.write_text(content)
    with pytest.raises(UserError) as caught:
        write_plots(read_records(path), tmp_path / "plots")
    _names_the_cell(caught.value.line(), row)
    assert edit[5] in caught.value.line()
    assert not (tmp_path / "plots").exists()  # refused before anything is made


@pytest.mark.parametrize("edit", EDITS, ids=[e[0] for e in EDITS])
def test_the_fix_the_message_gives_works(tmp_path, monkeypatch, capsys, edit):
    content, row = _edited(edit)
    path = tmp_path / "fixed.csv"
    path.write_text(_without_cell(content, row))
    code, out, err = cli_main(["report", str(path), "--format", "markdown"], monkeypatch, capsys)
    assert code == 0, err
    assert "error" not in err and out.strip()


def test_the_fix_works_for_compare_too(tmp_path, monkeypatch, capsys):
    content, row = _edited(EDITS[0])
    path = tmp_path / "fixed.csv"
    path.write_text(_without_cell(content, row))
    code, out, err = cli_main(["compare", str(BASELINE), str(path), "--format", "markdown"], monkeypatch, capsys)
    assert code == 1, err  # judged: the deleted cell is missing from NEW until it runs again
    assert "cell missing from NEW" in out and not err.strip()


# proxy-study-*: the study's tables; architectures.csv: scripts/architectures.py's table of what runs where, not results
COMMITTED = sorted(p for p in RESULTS.glob("*.csv") if "proxy-study" not in p.name and p.name != "architectures.csv")


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"bare {name} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_every_committed_results_file_passes_every_reader(monkeypatch, capsys, path):
    from ctxbench.results.store import read_records
    from ctxbench.tasks import registry
    from ctxbench.tasks.base import check_records

    check_records(read_records(path), registry())  # the pivot, compare, rank and the plots all call this
    before = path.read_bytes()
    code, out, err = cli_main(["report", str(path), "--format", "json"], monkeypatch, capsys)
    assert code == 0, err
    _strict(out)
    code, out, err = cli_main(["compare", str(path), str(path), "--format", "markdown"], monkeypatch, capsys)
    assert code == 0, err
    assert "PASS" in out
    assert path.read_bytes() == before


def test_rank_passes_on_a_committed_file(monkeypatch, capsys):
    code, out, err = cli_main(["rank", str(BASELINE), "--len", "8k", "--format", "json"], monkeypatch, capsys)
    assert code == 0, err
    data = _strict(out)
    assert data and all(row[i] is None for r in data for i, row in enumerate(r["p_holm"]))  # the diagonal
    assert all(r["null_reasons"]["p_holm"].startswith("a method is not tested against itself") for r in data)


# --- strict JSON ---------------------------------------------------------------------------------


def test_report_json_writes_null_with_a_reason_for_a_nan_cell(tmp_path, monkeypatch, capsys):
    header, rows = read_csv(BASELINE)
    nan = [{**r, "value": "nan"} if _agg("ppl", "ppl", "yarn")(r) else r for r in rows]
    path = tmp_path / "nan.csv"
    path.write_text(csv_text(header, nan))
    code, out, err = cli_main(["report", str(path), "--format", "json"], monkeypatch, capsys)
    assert code == 0, err
    assert "NaN" not in out.replace('"NaN:', "") and "Infinity" not in out.replace('Infinity:', "")
    data = _strict(out)
    cells = [c for p in data if p.get("task") == "ppl" for row in p["rows"] if row["method"] == "yarn" for c in row["cells"].values()]
    blank = [c for c in cells if c["value"] is None]
    assert blank and all(c["null_reasons"]["value"].startswith("NaN") for c in blank)


def test_strict_json_turns_every_non_finite_number_into_null_with_a_reason():
    from ctxbench.report.formats import strict_json

    data = {"a": math.nan, "b": [1.0, math.inf, [-math.inf]], "c": {"d": 2.0, "e": -math.inf}, "f": "NaN as text"}
    out = _strict(strict_json(data, {"a": "no units"}))
    assert out["a"] is None and out["null_reasons"]["a"] == "no units"
    assert out["b"] == [1.0, None, [None]] and "b" in out["null_reasons"]
    assert out["c"] == {"d": 2.0, "e": None, "null_reasons": {"e": "-Infinity: not a finite number"}}
    assert out["f"] == "NaN as text"


def test_a_strict_parser_refuses_what_python_writes_by_default():
    with pytest.raises(ValueError, match="bare NaN"):
        _strict(json.dumps([math.nan]))


# --- the declarations --------------------------------------------------------------------------


def test_every_built_in_task_declares_a_domain_for_every_metric_it_writes():
    from ctxbench.tasks import registry

    tasks = registry()
    written = {
        "ppl": {"ppl", "nll", "nll_pos", "nll_beyond_L", "docs", "tokens_per_s", "peak_mem_mb", "longppl", "kl", "key_tokens"},
        "passkey": {"accuracy", "correct", "answer_nll"}, "niah": {"accuracy", "score", "answer_nll"},
        "vt": {"accuracy", "score"}, "cwe": {"accuracy", "score"}, "fwe": {"accuracy", "score"}, "qa": {"accuracy", "score"},
    }  # fmt: skip
    for name, metrics in written.items():
        assert metrics <= set(tasks[name].domains), (name, metrics - set(tasks[name].domains))


def test_exact_tasks_score_a_trial_0_or_1_and_ruler_tasks_a_fraction():
    from ctxbench.tasks import registry
    from ctxbench.tasks.base import OUTCOME, SCORE

    tasks = registry()
    assert tasks["passkey"].domains["correct"] == OUTCOME and tasks["qa"].domains["score"] == OUTCOME  # string_match_part
    assert all(tasks[t].domains["score"] == SCORE for t in ("niah", "vt", "cwe", "fwe"))  # string_match_all: 0.25, 0.5, ...


def test_the_fallback_for_tasks_not_installed_is_never_stricter_than_a_built_in():
    from ctxbench.tasks import registry
    from ctxbench.tasks.base import DOMAIN_FALLBACK

    for task in registry().values():
        for metric, domain in task.domains.items():
            loose = DOMAIN_FALLBACK.get(metric)
            if loose is None:
                continue
            # what the task's own domain accepts: its values, or its bounds and a whole number between
            accepted = domain.values or [x for x in (domain.lo, domain.lo + 1, min(domain.hi, domain.lo + 1e6), domain.hi)
                                         if math.isfinite(x) and domain.holds(x)]  # fmt: skip
            assert accepted and all(loose.holds(x) for x in accepted), (task.name, metric)


def test_the_interval_place_is_the_identity_and_the_place_within_a_cell():
    from ctxbench.results.identity import IDENTITY, WITHIN
    from ctxbench.tasks.base import PLACE

    assert list(PLACE) == [*IDENTITY, *(c for c in WITHIN if c != "metric")]
    assert list(IDENTITY_COLUMNS) == IDENTITY


def test_nan_inf_and_text_keep_their_own_path():
    """Only finite numbers are judged by their domain: compare fails a NaN cell (exit 1), tables
    show it as missing; neither is an out-of-domain refusal."""
    from ctxbench.tasks.base import PERPLEXITY, check_records

    rows = [{"task": "ppl", "metric": "ppl", "value": v, "status": "ok"} for v in ("nan", "inf", "n/a", "")]
    check_records(rows, None)
    assert not PERPLEXITY.holds(0.999) and PERPLEXITY.holds(1.0) and PERPLEXITY.holds(1 - 1e-12)  # float rounding


def test_a_minus_infinite_perplexity_is_refused_not_shown_as_the_best():
    from ctxbench.tasks.base import PERPLEXITY, _outside

    assert "outside" in _outside("ppl", "-inf", PERPLEXITY)
    assert _outside("ppl", "nan", PERPLEXITY) == ""  # NaN keeps its own path (a failed cell)
