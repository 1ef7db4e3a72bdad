"""RULER's suite score in `report` (ctxbench.report.rulerscore): the mean over RULER's tasks per length with
its coverage, RULER's wAvg (inc/dec), RULER's effective length at 85.6, the bootstrap interval, the
settings that are never averaged together, and every report format carrying them."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess

import pytest
from helpers import ROOT

from ctxbench.report.formats import pivots, ruler_suites, to_csv, to_json, to_markdown
from ctxbench.report.rulerscore import THRESHOLD, effective_length, wavg, weights
from ctxbench.results.store import Row, read_records, write_records
from ctxbench.tasks.base import Measurement
from ctxbench.tasks.common import accuracy_rows

RULER_2K = ROOT / "results" / "ruler-smollm2-2k.csv"


def _cell(task: str, variant: str, length: int, scores: list[float], label: str = "none", factor="", depth="",
          options: dict | None = None, data_digest: str | None = None, seed: int = 0) -> list[dict]:  # fmt: skip
    """One cell's rows as the runner writes them: a ``score`` row per trial, then the cell's
    ``accuracy`` and its Wilson interval (:func:`accuracy_rows`), every row with ``cell_rows``."""
    measurements = [Measurement("score", float(s), trial=i, tokens=length) for i, s in enumerate(scores)]
    measurements += accuracy_rows(scores, tokens=length, seconds=0.0)
    opts = {"chat": False, "protocol": "ruler"} if options is None else options
    return [
        Row(run_id="r1", time="2026-01-01T00:00:00+00:00", model="m", model_digest="sha256:00aa", dataset=f"ruler-{task}",
            data_digest=data_digest or f"sha256:{task}{variant}", task=task, method=label.split("(")[0], label=label, factor=factor,
            length=length, stride="", depth=depth, variant=variant, trial=m.trial, doc=m.doc, metric=m.metric, value=m.value,
            tokens=m.tokens, seconds=m.seconds, status="ok", device="cpu", dtype="float32", seed=seed, method_params="{}",
            options=json.dumps(opts, sort_keys=True), ctxbench_version="0", torch_version="0", transformers_version="0",
            answer="", extra=json.dumps({**m.extra, "cell_rows": len(measurements)}, sort_keys=True)).as_strings()
        for m in measurements
    ]  # fmt: skip


def _through_a_file(records: list[dict], tmp_path) -> list[dict]:
    """Write and read back, as `report` reads a results file."""
    path = tmp_path / "r.csv"
    write_records(path, records)
    return read_records(path)


def _small(tmp_path) -> list[dict]:
    # none at 4k: niah single_1 3/4, vt 1/4, cwe (fractional scores) 3/4, qa_1 2/4 -> (75 + 25 + 75 + 50) / 4 = 56.25
    records = _cell("niah", "single_1", 4096, [1, 1, 1, 0]) + _cell("vt", "default", 4096, [1, 0, 0, 0])
    records += _cell("cwe", "default", 4096, [0.5, 0.5, 1, 1])
    records += _cell("qa", "qa_1", 4096, [1, 1, 0, 0], options={"chat": False})  # qa without a protocol reads as ruler
    records += _cell("passkey", "", 4096, [1, 1, 1, 1], options={"chat": False, "digits": 5})  # not a RULER task
    return _through_a_file(records, tmp_path)


def test_ruler_avg_is_the_mean_of_the_tasks_present_in_percent_with_its_coverage(tmp_path):
    (s,) = ruler_suites(pivots(_small(tmp_path)))
    cell = s.rows["none"].cells[4096]
    assert cell.value == pytest.approx(56.25, abs=1e-12)
    assert (cell.n_tasks, cell.tasks) == (4, ("niah_single_1", "vt", "cwe", "qa_1"))
    assert s.setting["protocol"] == "ruler" and s.setting["chat"] is False
    assert "covers 4 of RULER's 13 tasks" in s.notes[0] and "niah_multikey_1" in s.notes[0] and "passkey" not in s.notes[0]


def test_all_thirteen_tasks_make_rulers_average_and_no_coverage_note(tmp_path):
    from ctxbench.report.rulerscore import TASKS

    records = [r for (task, variant) in TASKS for r in _cell(task, variant, 4096, [1, 1])]
    (s,) = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    row = s.rows["none"]
    assert (row.cells[4096].value, row.cells[4096].n_tasks, row.n_tasks) == (100.0, 13, 13)
    assert (row.effective, row.all_pass) == (4096, True) and not any("covers" in note for note in s.notes)
    assert "| none | 100.0 [100.0–100.0] (13/13) |" in to_markdown(pivots(_through_a_file(records, tmp_path)))


def test_the_committed_2k_run_averages_its_eleven_tasks():
    from ctxbench.results.identity import drop_partial
    from ctxbench.tasks import registry

    records = drop_partial(read_records(RULER_2K), registry())[0]
    by_hand = [r for r in records if r["metric"] == "accuracy" and r["trial"] == "all"]
    assert len(by_hand) == 11
    (s,) = ruler_suites(pivots(records, registry()))
    cell = s.rows["none"].cells[2048]
    assert cell.n_tasks == 11 and cell.value == pytest.approx(100 * sum(float(r["value"]) for r in by_hand) / 11, abs=1e-9)
    assert cell.lo < cell.value < cell.hi
    assert s.setting["protocol"] == "exact" and s.rows["none"].effective is None  # 39.6 < 85.6 at the only length


def test_wavg_is_rulers_formula():
    # by hand: lengths 1k, 2k, 4k weighted 1, 2, 3 (inc) and 3, 2, 1 (dec), over 6
    assert wavg({1024: 90.0, 2048: 60.0, 4096: 30.0}) == pytest.approx(((90 + 120 + 90) / 6, (270 + 120 + 30) / 6))
    # RULER's README table, Llama-3.1-70B at 4k..128k: wAvg (inc) 85.5, wAvg (dec) 93.7; GPT-4-1106: 89.0, 94.1
    grid = [4096 << i for i in range(6)]
    for scores, inc, dec in (([96.5, 95.8, 95.4, 94.8, 88.4, 66.6], 85.5, 93.7), ([96.6, 96.3, 95.2, 93.2, 87.0, 81.2], 89.0, 94.1)):
        got = wavg(dict(zip(grid, scores, strict=True)))
        assert (round(got[0], 1), round(got[1], 1)) == (inc, dec)
    # a method missing the table's first length keeps the weights its lengths have on the table's grid
    assert weights([2048, 4096], grid=[1024, 2048, 4096]) == ([2 / 5, 3 / 5], [2 / 3, 1 / 3])


def test_wavg_through_the_report_matches_the_hand_computation(tmp_path):
    records = []
    for n, k in ((1024, 9), (2048, 6), (4096, 3)):  # niah single_1 k/10 right: 90, 60, 30
        records += _cell("niah", "single_1", n, [1] * k + [0] * (10 - k))
    (s,) = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    row = s.rows["none"]
    assert (row.wavg_inc, row.wavg_dec) == (pytest.approx(50.0), pytest.approx(70.0))
    assert row.wavg_inc_lo <= row.wavg_inc <= row.wavg_inc_hi and row.wavg_dec_lo <= row.wavg_dec <= row.wavg_dec_hi
    assert "lengths 1k, 2k, 4k: 1 of RULER's 6" in " ".join(s.notes)


def test_effective_length_at_the_fixed_threshold_boundary():
    assert THRESHOLD == 85.6
    assert effective_length({4096: 85.6, 8192: 85.6, 16384: 85.59}) == (8192, False)  # 85.6 passes, just below does not
    assert effective_length({4096: 85.5999999}) == (None, False)  # even the shortest fails: RULER's "<4K"
    assert effective_length({4096: 99.0, 8192: 85.6}) == (8192, True)  # every length passes: RULER's ">8K"
    assert effective_length({4096: 90.0, 8192: 80.0, 16384: 90.0}) == (4096, False)  # it must *stay* above


def test_effective_length_through_the_report_at_exactly_85_6(tmp_path):
    # three tasks of 125 trials: 121 + 104 + 96 = 321 of 375 = 85.6% at 4k, which in floats comes out
    # one step below 85.6 and still passes; one fewer right at 8k = 85.33%
    tasks = [("niah", "single_1"), ("vt", "default"), ("cwe", "default")]
    records = []
    for n, rights in ((4096, (121, 104, 96)), (8192, (121, 104, 95))):
        for (task, variant), k in zip(tasks, rights, strict=True):
            records += _cell(task, variant, n, [1] * k + [0] * (125 - k))
    ps = pivots(_through_a_file(records, tmp_path))
    (s,) = ruler_suites(ps)
    row = s.rows["none"]
    assert row.cells[4096].value == pytest.approx(85.6, abs=1e-9) and row.cells[4096].value < 85.6
    assert row.cells[8192].value == pytest.approx(100 * 320 / 375)
    assert (row.effective, row.all_pass) == (4096, False)
    assert to_markdown(ps).split("| none | 85.6 [")[-1].split("\n")[0].endswith("| 4k [<4k–8k] (3/13) |")


def test_a_method_missing_a_length_keeps_its_lengths_weights_on_the_tables_grid(tmp_path):
    records = []
    for n, k in ((1024, 10), (2048, 8), (4096, 4)):
        records += _cell("niah", "single_1", n, [1] * k + [0] * (10 - k))
    for n, k in ((2048, 8), (4096, 4)):  # ntk has no 1k: 80 at 2k (rank 2 of 3), 40 at 4k (rank 3)
        records += _cell("niah", "single_1", n, [1] * k + [0] * (10 - k), label="ntk", factor=2.0)
    (s,) = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    ntk = s.rows["ntk"]
    assert (ntk.wavg_inc, ntk.wavg_dec) == (pytest.approx((2 * 80 + 3 * 40) / 5), pytest.approx((2 * 80 + 1 * 40) / 3))
    assert any(note.startswith("ntk: not measured at 1k") for note in s.notes)


def test_the_interval_contains_the_estimate_and_collapses_when_every_trial_agrees(tmp_path):
    records = _cell("niah", "single_1", 4096, [1, 0, 1, 1, 0, 1, 1, 1]) + _cell("vt", "default", 4096, [0.2, 0.4, 1, 0, 0.8, 0.6])
    # "agree": every trial of a task has one score (1, and 0.5 with RULER's fractional metric)
    records += _cell("niah", "single_1", 4096, [1] * 6, label="yarn", factor=2.0) + _cell("vt", "default", 4096, [0.5] * 6, label="yarn", factor=2.0)
    (s,) = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    varied, agreed = s.rows["none"].cells[4096], s.rows["yarn"].cells[4096]
    assert varied.lo < varied.value < varied.hi
    assert agreed.value == 75.0 and (agreed.lo, agreed.hi) == (pytest.approx(75.0, abs=1e-12), pytest.approx(75.0, abs=1e-12))


def test_every_method_gets_the_same_resampling_of_the_same_trials(tmp_path):
    scores = [1, 0, 1, 1, 0, 0, 1, 1]
    records = _cell("niah", "single_1", 4096, scores) + _cell("niah", "single_1", 4096, scores, label="ntk", factor=2.0)
    (s,) = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    a, b = s.rows["none"].cells[4096], s.rows["ntk"].cells[4096]
    assert (a.lo, a.hi) == (b.lo, b.hi) and a.lo < a.hi


def test_rows_of_another_chat_or_protocol_are_never_averaged_together(tmp_path):
    raw = {"chat": False, "protocol": "ruler"}
    records = _cell("niah", "single_1", 4096, [1] * 4, options=raw) + _cell("vt", "default", 4096, [1] * 4, options=raw)
    records += _cell("niah", "single_1", 4096, [0] * 4, options={"chat": True, "protocol": "ruler"})
    records += _cell("vt", "default", 4096, [0] * 4, options={"chat": False, "protocol": "exact"})
    records += _cell("cwe", "default", 4096, [0] * 4, options={"chat": False})  # cwe without a protocol reads as exact
    ss = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    got = {(s.setting["chat"], s.setting["protocol"]): (s.rows["none"].cells[4096].value, s.rows["none"].cells[4096].tasks) for s in ss}
    assert got == {(False, "ruler"): (100.0, ("niah_single_1", "vt")), (True, "ruler"): (0.0, ("niah_single_1",)),
                   (False, "exact"): (0.0, ("vt", "cwe"))}  # fmt: skip
    titles = [s.title for s in ss]
    assert len(set(titles)) == 3 and any("protocol exact, chat false" in t for t in titles)


def test_a_row_without_a_protocol_reads_as_exact_and_a_qa_row_as_ruler():
    records = _cell("niah", "single_1", 4096, [1] * 4, options={"chat": False}) + _cell("qa", "qa_2", 4096, [0] * 4, options={"chat": False})
    ss = ruler_suites(pivots(records))  # the rows as they are (a file read here would complete niah's options too)
    assert {s.setting["protocol"]: s.rows["none"].cells[4096].tasks for s in ss} == {"exact": ("niah_single_1",), "ruler": ("qa_2",)}


def test_two_runs_of_one_task_with_different_data_are_left_out_and_said(tmp_path):
    records = _cell("niah", "single_1", 4096, [1] * 4) + _cell("vt", "default", 4096, [0] * 4)
    records += _cell("vt", "default", 4096, [1] * 4, data_digest="sha256:beefbeef00")
    (s,) = ruler_suites(pivots(_through_a_file(records, tmp_path)))
    assert s.rows["none"].cells[4096].tasks == ("niah_single_1",)
    assert any("vt left out of the average" in note for note in s.notes)


def test_csv_json_and_markdown_carry_the_suite_score(tmp_path):
    records = _small(tmp_path)
    ps = pivots(records)
    (s,) = ruler_suites(ps)
    row = s.rows["none"]
    md = to_markdown(ps)
    assert f"#### {s.title}" in md and "| method | 4k | wAvg (inc) | wAvg (dec) | effective length (≥85.6) |" in md
    assert "| none | 56.2 [" in md and "(4/13) | <4k (4/13) |" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(ps))))
    niah = next(r for r in rows if r["task"] == "niah")
    assert float(niah["ruler_avg"]) == row.cells[4096].value and niah["ruler_n_tasks"] == "4"
    assert float(niah["ruler_wavg_inc"]) == row.wavg_inc and float(niah["ruler_avg_lo"]) == row.cells[4096].lo
    assert niah["ruler_effective_length"] == "" and niah["ruler_setting"] == "protocol ruler, chat false"
    assert next(r for r in rows if r["task"] == "passkey")["ruler_avg"] == ""  # not a RULER task
    js = json.loads(to_json(ps))
    assert [j.get("kind") for j in js] == [None] * len(ps) + ["ruler_suite"]  # pivots first, as before
    suite = js[-1]
    assert suite["threshold"] == 85.6 and suite["rows"][0]["cells"]["4096"]["n_tasks"] == 4
    assert suite["rows"][0]["cells"]["4096"]["ruler_avg"] == row.cells[4096].value
    assert suite["rows"][0]["wavg_dec"] == row.wavg_dec and suite["rows"][0]["effective_length"] is None


def test_without_ruler_rows_the_report_is_what_it_was(tmp_path):
    records = _through_a_file(_cell("passkey", "", 4096, [1, 0], options={"chat": False, "digits": 5}), tmp_path)
    ps = pivots(records)
    assert ruler_suites(ps) == []
    assert "ruler" not in to_csv(ps) and len(json.loads(to_json(ps))) == len(ps) and "RULER" not in to_markdown(ps)


@pytest.mark.integration
def test_the_table_format_shows_the_suite_score(tmp_path):
    write_records(tmp_path / "r.csv", _small(tmp_path))
    env = {**os.environ, "COLUMNS": "250"}  # room for every cell on one line
    proc = subprocess.run(["ctxbench", "report", str(tmp_path / "r.csv")], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "RULER suite score — m, any factor (protocol ruler, chat false)" in proc.stdout
    assert "56.2 [" in proc.stdout and "(4/13)" in proc.stdout and "effective length (≥85.6)" in proc.stdout
