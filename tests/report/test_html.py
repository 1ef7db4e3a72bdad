"""`ctxbench report --html`: one self-contained page whose numbers are `report --format json`'s, each
cell's verdict `report --baseline`'s, labels shown as text, and bad input refused with nothing written.
(What a browser makes of the page: tests/report/test_html_browser.py.)"""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from helpers import RESULTS, cli_main, one_error_line

from ctxbench.report.html import embedded

REALDATA = str(RESULTS / "ruler-smollm2-2k4k-realdata.csv")
HF, VLLM = str(RESULTS / "backend-hf.csv"), str(RESULTS / "backend-vllm.csv")


def _page(argv, monkeypatch, capsys, out) -> tuple[dict, str]:
    code, stdout, stderr = cli_main(["report", *argv, "--html", str(out), "--format", "json"], monkeypatch, capsys)
    assert code == 0, stderr
    page = out.read_text(encoding="utf-8")
    return embedded(page), page


def _json(argv, monkeypatch, capsys) -> list:
    code, stdout, stderr = cli_main(["report", *argv, "--format", "json"], monkeypatch, capsys)
    assert code == 0, stderr
    return json.loads(stdout)


def test_the_page_embeds_exactly_the_json_report_of_the_same_file(tmp_path, monkeypatch, capsys):
    data, _ = _page([REALDATA], monkeypatch, capsys, tmp_path / "r.html")
    assert data["report"] == _json([REALDATA], monkeypatch, capsys)
    assert "ruler_suite" in [p.get("kind") for p in data["report"]]  # RULER's suite score travels with it


def test_each_cells_verdict_is_report_baselines_paired_holm_adjusted_test(tmp_path, monkeypatch, capsys):
    data, _ = _page([REALDATA], monkeypatch, capsys, tmp_path / "r.html")
    assert data["baseline"] == "none"
    reference = _json([REALDATA, "--baseline", "none"], monkeypatch, capsys)
    compared = 0
    for i, p in enumerate(x for x in reference if "kind" not in x):
        for row in p["rows"]:
            for n, cell in row["cells"].items():
                verdict = data["verdicts"].get(f"{i}|{row['method']}|{n}")
                if row["method"] == "none":
                    assert verdict["is_baseline"]
                    continue
                assert (verdict["delta"], verdict["lo"], verdict["hi"], verdict["p"], verdict["p_holm"], verdict["n"]) == \
                    (cell["delta"], cell["delta_lo"], cell["delta_hi"], cell["p_value"], cell["p_holm"], cell["paired_n"])  # fmt: skip
                compared += 1
    assert compared == 14  # yarn against none: 7 tables x 2 lengths


def test_a_cells_trials_are_its_trial_rows_with_the_scorers_decision_and_their_row_ids(tmp_path, monkeypatch, capsys):
    from ctxbench.results.rowid import find

    data, _ = _page([REALDATA], monkeypatch, capsys, tmp_path / "r.html")
    titles = [p["title"] for p in data["report"] if "kind" not in p]
    i = titles.index("niah multikey_1 accuracy — smollm2-135m, factor 2")
    trials = data["samples"][f"{i}|none|4096"]["trials"]
    cell = next(r for r in data["report"][i]["rows"] if r["method"] == "none")["cells"]["4096"]
    assert len(trials) == cell["n"] == 3
    assert sum(t["score"] for t in trials) / 3 == pytest.approx(cell["value"])
    for t in trials:
        row = find(t["id"])  # the id names the row the trial came from
        assert (row["trial"], row["answer"], float(row["value"])) == (t["trial"], t["answer"], t["score"])
        assert t["found"] == [e.lower() in t["answer"].lower() for e in t["expected"]]  # string_match_all, one answer at a time
        assert t["rebuild"] and (t["seed"], t["length"], t["variant"]) == ("0", "4096", "multikey_1")


def test_provenance_names_digests_versions_and_a_command_that_reruns_each_run(tmp_path, monkeypatch, capsys):
    data, _ = _page([REALDATA], monkeypatch, capsys, tmp_path / "r.html")
    runs = data["provenance"]
    assert {r["task"] for r in runs} == {"niah", "qa"}
    yarn = next(r for r in runs if r["label"] == "yarn" and r["task"] == "niah")
    assert yarn["model_digest"] == ["sha256:b179c9523d0e6a0f"] and yarn["torch_version"] == ["2.13.0+cpu"]
    assert yarn["command"] == ("ctxbench niah --model smollm2-135m --method yarn --factor 2 --len 2k --variant single_2 --trials 5 --chat "
                               f"--protocol ruler --seed 0 --dtype float32 --device cpu --backend hf --out {REALDATA}")  # fmt: skip


def test_two_files_carry_the_gates_comparison_changed_cells_first_and_trials_side_by_side(tmp_path, monkeypatch, capsys):
    data, _ = _page([HF, VLLM], monkeypatch, capsys, tmp_path / "c.html")
    compare = data["compare"]
    statuses = [c["status"] for c in compare["changes"]]
    order = ["worse", "failed", "missing", "changed", "better", "new", "ok"]
    assert statuses == sorted(statuses, key=order.index)
    verdicts = [p["status"] for p in compare["parity"]["pairs"]]  # hf and vllm: compare --across-backends as well
    assert verdicts and set(verdicts) <= {"same", "differs", "failed", "unpaired"}
    pairs = compare["trials"]
    differ = [p for p in pairs if p["differ"]]
    assert differ and pairs[: len(differ)] == differ  # answers that differ first
    assert all(p["base_answer"] != p["new_answer"] for p in differ)
    assert len(differ) == sum(p["trials"] - p["same"] for p in compare["parity"]["pairs"])  # the parity's count of differing answers


def _relabelled(tmp_path, label: str):
    text = open(REALDATA, encoding="utf-8").read()
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    for r in rows:
        if r["label"] == "yarn":
            r["label"] = label
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=reader.fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "hostile.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


HOSTILE = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def test_a_label_that_is_markup_stays_data_and_never_closes_the_data_block(tmp_path, monkeypatch, capsys):
    data, page = _page([str(_relabelled(tmp_path, HOSTILE))], monkeypatch, capsys, tmp_path / "h.html")
    assert HOSTILE in {r["method"] for p in data["report"] if "kind" not in p for r in p["rows"]}
    assert "window.pwned" in page and "<script>window.pwned" not in page and "<img src=x" not in page
    assert page.count("</script>") == 2  # the data block's and the script's own


def test_the_realdata_page_is_one_small_file_that_loads_nothing(tmp_path, monkeypatch, capsys):
    _, page = _page([REALDATA], monkeypatch, capsys, tmp_path / "r.html")
    assert len(page.encode()) < 150_000  # "0.1 MB" on docs/looking-at-results.md; the bound is 5 MB
    assert os.listdir(tmp_path) == ["r.html"]  # no temp file left, nothing beside it
    for remote in ("http://", "https://", "//cdn", "<link ", " src="):
        assert remote not in page.replace('xmlns="http://www.w3.org', "").replace('"http://www.w3.org/2000/svg"', ""), remote


@pytest.mark.parametrize("case", ["empty", "header only", "another tool's", "folder", "missing folder", "unwritable", "the input"])
def test_bad_input_gets_one_line_and_nothing_is_written(case, tmp_path, monkeypatch, capsys):
    src, out, words = REALDATA, tmp_path / "out.html", []
    if case == "empty":
        src, words = tmp_path / "empty.csv", ["empty"]
        src.write_text("")
    elif case == "header only":
        src, words = tmp_path / "header.csv", ["holds no rows"]
        src.write_text(open(REALDATA).readline())
    elif case == "another tool's":
        src, words = tmp_path / "other.csv", ["not a ctxbench results CSV"]
        src.write_text("a,b,c\n1,2,3\n")
    elif case == "folder":
        out, words = tmp_path, ["is a folder"]
    elif case == "the input":  # the page would replace the results it reports
        src = tmp_path / "run.csv"
        src.write_text(open(REALDATA).read())
        out, words = src, ["is the results file"]
    elif case == "missing folder":
        out, words = tmp_path / "nowhere" / "r.html", ["does not exist"]
    elif os.geteuid() == 0:  # root writes into a read-only folder: /proc takes no new file, whoever asks
        out, words = "/proc/ctxbench-report.html", ["cannot write"]
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out, words = locked / "r.html", ["cannot write", "permission denied"]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, stdout, stderr = cli_main(["report", str(src), "--html", str(out)], monkeypatch, capsys)
    one_error_line(code, stderr, words)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    if case == "the input":
        assert src.read_text() == open(REALDATA).read()


def test_a_failed_write_leaves_the_old_page_and_no_temp_file(tmp_path, monkeypatch):
    from ctxbench.errors import UserError
    from ctxbench.report import html

    out = tmp_path / "r.html"
    out.write_text("old")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # the disk fills at the last step of the write
    with pytest.raises(UserError, match="No space left"):
        html.write(str(out), "<html>new</html>")
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["r.html"]


def test_a_perplexity_cell_carries_its_per_document_rows_and_its_nll_by_position(tmp_path, monkeypatch, capsys):
    from ctxbench.results.store import read_records

    path = str(RESULTS / "quickstart-smollm2.csv")
    data, _ = _page([path], monkeypatch, capsys, tmp_path / "q.html")
    cell = data["samples"]["0|yarn|4096"]
    rows = [r for r in read_records(path) if r["label"] == "yarn" and r["length"] == "4096" and r["status"] == "ok"]
    docs = [(r["doc"], r["metric"], float(r["value"])) for r in rows if r["doc"] not in ("", "all")]
    assert [(d["doc"], d["metric"], d["value"]) for d in cell["docs"]] == docs and docs
    curve = sorted((float(r["pos_start"]), float(r["pos_end"]), float(r["value"])) for r in rows if r["metric"] == "nll_pos")
    assert [tuple(c) for c in cell["curve"]] == curve and len(curve) > 2
