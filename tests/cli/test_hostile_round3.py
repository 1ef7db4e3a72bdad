"""Hostile inputs, round 3 (issue 37): options that silently dropped input, paths the filesystem
cannot hold, UTF-16 text, ceilings on counts, and suite errors that blamed a flag the user never
typed. Each case runs ``ctxbench.cli.main`` in-process and asserts exit code 2, one line
``error: <what> — <fix>`` with the words it must hold, that no file in the folder changed, and
then applies the fix (the command the fix describes) and asserts it succeeds: a fix that is itself
refused is a wrong message. The memory-capped cases (huge counts under RLIMIT_AS) are in
``tests/runner/test_plan_scale.py``."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from helpers import cli_main

from tests.helpers import DATA, RESULTS

RESULT = RESULTS / "attention-smollm2-16k.csv"  # a committed results file: report/rank/compare read it
LONG = "a" * 300  # a name longer than NAME_MAX (255 bytes)
GEOMETRY = ["--head-dim", "64", "--base", "1e4", "--trained-len", "4k"]
SUITES = {  # name -> (refused suite, the suite with the fix applied: the fix's own words, pasted)
    "trials_text": ('[passkey]\ntrials = "x"\n', "[passkey]\ntrials = 4\n"),
    "max_trials": ('[passkey]\ntrials = "auto"\nmax_trials = 99999\n', '[passkey]\ntrials = "auto"\nmax_trials = 10000\n'),
    "budget": ("[passkey]\nbudget = 3\n", '[passkey]\nbudget = 3\ntrials = "auto"\n'),
    "depths": ("[niah]\ndepths = 5\n", '[niah]\ndepths = 5\nprotocol = "exact"\n'),
    "docs": ("[ppl]\ndocs = 0\n", "[ppl]\ndocs = 4\n"),
    "depths_most": ("[passkey]\ndepths = 5000\n", "[passkey]\ndepths = 1000\n"),
    "dataset": ('[ppl]\ndataset = ""\n', "[ppl]\n"),
    "metrics_twice": ('[ppl]\nmetrics = ["kl", "kl"]\n', '[ppl]\nmetrics = ["kl"]\n'),
    "stride": ('[ppl]\nstride = "1.5k"\nlengths = ["4k"]\n', '[ppl]\nstride = 4096\nlengths = ["4k"]\n'),
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder with a results file, a file where a folder is expected, UTF-16 copies of good
    inputs (and their UTF-8 conversions, made as the fix says: iconv), and the suites."""
    shutil.copy(RESULT, tmp_path / "r.csv")
    (tmp_path / "afile").write_text("not a folder\n")
    sources = {"r": RESULT.read_text(), "essay": "Prose about rivers and the sea. " * 200, "doc": "Some document text. " * 400}
    for name, text, suffix in (("r", sources["r"], ".csv"), ("essay", sources["essay"], ".txt"), ("doc", sources["doc"], ".txt")):
        (tmp_path / f"{name}16{suffix}").write_bytes(text.encode("utf-16"))
    (tmp_path / "squad16.json").write_bytes((DATA / "qa" / "squad-dev-v2.0-mini.json").read_text().encode("utf-16-le"))
    (tmp_path / "docs16.jsonl").write_bytes('{"text": "one document"}\n'.encode("utf-16-be"))
    (tmp_path / "s16.toml").write_bytes("[passkey]\ntrials = 2\n".encode("utf-16"))
    for name, (bad, good) in SUITES.items():
        (tmp_path / f"bad_{name}.toml").write_text(bad)
        (tmp_path / f"good_{name}.toml").write_text(good)
    header, rest = RESULT.read_text().split("\n", 1)
    (tmp_path / "dupcol.csv").write_text(header + ",metric\n" + "".join(line + ",accuracy\n" for line in rest.splitlines()))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path


def _iconv(path, encoding: str, out) -> None:
    """The fix's own command: ``iconv -f ENCODING -t UTF-8 FILE > NEW``."""
    with open(out, "wb") as f:
        subprocess.run(["iconv", "-f", encoding, "-t", "UTF-8", str(path)], stdout=f, check=True)


def _snapshot(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and ".cache" not in p.parts}



DRY = ["--dry-run"]
# (id, argv, words of the one error line, a word its fix holds, the argv the fix gives)
CASES = [
    # -- an empty value is refused, never read as "not given" (the fix: drop the flag, or give one)
    ("out empty", ["ppl", "--out", "", *DRY], ["--out '' is empty"], "drop --out", ["ppl", *DRY]),
    ("len empty", ["passkey", "--len", "", *DRY], ["--len '' is empty"], "drop --len", ["passkey", *DRY]),
    ("method blank", ["ppl", "--method", " ", *DRY], ["--method ' ' is empty"], "drop --method", ["ppl", *DRY]),
    ("model empty", ["ppl", "--model", "", *DRY], ["--model '' is empty"], "drop --model", ["ppl", *DRY]),
    ("param empty", ["ppl", "--method", "yarn", "--param", "", *DRY], ["--param '' is empty"], "drop --param", ["ppl", "--method", "yarn", *DRY]),
    ("dataset empty", ["ppl", "--dataset", "", *DRY], ["--dataset '' is empty"], "drop --dataset", ["ppl", *DRY]),
    ("metrics empty", ["ppl", "--metrics", "", *DRY], ["--metrics '' is empty"], "drop --metrics", ["ppl", *DRY]),
    ("plot empty", ["ppl", "--plot", "", *DRY], ["--plot '' is empty"], "drop --plot", ["ppl", *DRY]),
    ("haystack empty", ["niah", "--haystack", "", *DRY], ["--haystack '' is empty"], "drop --haystack", ["niah", *DRY]),
    ("task baseline empty", ["passkey", "--trials", "auto", "--baseline", "", *DRY], ["--baseline '' is empty"], "drop --baseline",
     ["passkey", "--trials", "auto", *DRY]),
    ("report baseline empty", ["report", "r.csv", "--baseline", ""], ["--baseline '' is empty"], "drop --baseline", ["report", "r.csv"]),
    ("report method empty", ["report", "r.csv", "--method", ""], ["--method '' is empty"], "drop --method", ["report", "r.csv"]),
    ("report task empty", ["report", "r.csv", "--task", ""], ["--task '' is empty"], "drop --task", ["report", "r.csv"]),
    ("report file empty", ["report", ""], ["FILES '' is empty"], "give a value", ["report", "r.csv"]),
    ("rank len empty", ["rank", "r.csv", "--len", ""], ["--len '' is empty"], "give a value", ["rank", "r.csv", "--len", "16k"]),
    ("compare new empty", ["compare", "r.csv", ""], ["NEW '' is empty"], "give a value", ["compare", "r.csv", "r.csv"]),
    ("freqs method empty", ["freqs", "--method", "", *GEOMETRY], ["--method '' is empty"], "give a value", ["freqs", "--method", "yarn", *GEOMETRY]),
    ("export to empty", ["export", "--method", "yarn", "--to", "", *GEOMETRY], ["--to '' is empty"], "give a value",
     ["export", "--method", "yarn", "--to", "json", *GEOMETRY]),
    ("sweep suite empty", ["sweep", "", *DRY], ["SUITE '' is empty"], "give a value", ["sweep", "good_docs.toml", *DRY]),
    # -- a repeated --metrics keeps every value: a name twice across flags is refused like one flag's
    ("metrics twice across flags", ["ppl", "--metrics", "kl", "--metrics", "kl", *DRY], ["--metrics name is given twice"],
     "each metric once", ["ppl", "--metrics", "kl", *DRY]),
    ("answer_nll twice", ["passkey", "--metrics", "answer_nll", "--metrics", "answer_nll,answer_nll", *DRY], ["given twice"],
     "each metric once", ["passkey", "--metrics", "answer_nll", *DRY]),
    ("metrics unknown in second flag", ["ppl", "--metrics", "kl", "--metrics", "longpl", *DRY], ["unknown --metrics metric 'longpl'"],
     "longppl", ["ppl", "--metrics", "kl", "--metrics", "longppl", *DRY]),
    # -- counts above a ceiling that means something
    ("trials above the most", ["passkey", "--trials", "10001", *DRY], ["--trials 10001", "10000"], "--trials 10000",
     ["passkey", "--trials", "10000", *DRY]),
    ("max-trials above the most", ["niah", "--trials", "auto", "--max-trials", "10001", *DRY], ["--max-trials 10001"], "--max-trials 10000",
     ["niah", "--trials", "auto", "--max-trials", "10000", *DRY]),
    ("depths above the most", ["passkey", "--depths", "1001", *DRY], ["--depths 1001", "1000"], "--depths 1000", ["passkey", "--depths", "1000", *DRY]),
    ("depth list above the most", ["passkey", "--depths", ",".join(f"{i / 1000:.4f}" for i in range(1001)), *DRY], ["1001 depths"],
     "--depths 11", ["passkey", "--depths", "11", *DRY]),
    ("docs above the most", ["ppl", "--docs", "10001", *DRY], ["--docs 10001"], "--docs 10000", ["ppl", "--docs", "10000", *DRY]),
    ("length above 16m", ["ppl", "--len", "16m,17m", *DRY], ["length '17m'", "16m"], "at most 16m", ["ppl", "--len", "16m", *DRY]),
    ("freqs length above 16m", ["freqs", "--method", "yarn", "--len", "99999m", *GEOMETRY], ["length '99999m'"], "128k",
     ["freqs", "--method", "yarn", "--len", "128k", *GEOMETRY]),
    ("stride above 16m", ["ppl", "--stride", "17m", "--len", "4k", *DRY], ["--stride '17m'"], "at most 16m",
     ["ppl", "--stride", "4k", "--len", "4k", *DRY]),
    # -- paths: names the filesystem cannot hold, a file where a folder must be
    ("out name too long", ["ppl", "--out", LONG + ".csv", *DRY], ["--out: the name", "304 bytes", "242"], "at most 242 bytes",
     ["ppl", "--out", "a" * 238 + ".csv", *DRY]),
    ("out folder name too long", ["ppl", "--out", f"{LONG}/r.csv", *DRY], ["--out: the name", "300 bytes"], "at most 255",
     ["ppl", "--out", "r.csv", *DRY]),
    ("out under a file", ["ppl", "--out", "afile/r.csv", *DRY], ["'afile' is a file, not a folder"], "another --out",
     ["ppl", "--out", "r2.csv", *DRY]),
    ("plot under a file", ["ppl", "--plot", "afile/plots", *DRY], ["cannot make --plot", "'afile' is a file"], "folder",
     ["ppl", "--plot", "plots", *DRY]),
    ("plot is a file", ["report", "r.csv", "--plot", "afile"], ["--plot 'afile' is a file"], "folder", ["report", "r.csv", "--plot", "plots"]),
    ("plot name too long", ["ppl", "--plot", LONG, *DRY], ["--plot: the name", "300 bytes"], "at most 255", ["ppl", "--plot", "plots", *DRY]),
    ("report name too long", ["report", LONG + ".csv"], ["results file: the name"], "at most 255", ["report", "r.csv"]),
    ("suite name too long", ["sweep", LONG + ".toml", *DRY], ["suite file: the name"], "at most 255", ["sweep", "good_docs.toml", *DRY]),
    ("freqs plot name too long", ["freqs", "--method", "yarn", "--plot", LONG + ".png", *GEOMETRY], ["--plot: the name"], "at most 255",
     ["freqs", "--method", "yarn", "--plot", "f.png", *GEOMETRY]),
    # -- UTF-16 is text, not binary: the fix converts it (applied below with iconv), and the converted file works
    ("utf-16 results", ["report", "r16.csv"], ["UTF-16 text"], "iconv -f UTF-16", ["report", "r16.utf8.csv"]),
    ("utf-16 haystack", ["niah", "--haystack", "essay16.txt", *DRY], ["haystack file", "UTF-16 text"], "iconv -f UTF-16",
     ["niah", "--haystack", "essay16.utf8.txt", *DRY]),
    ("utf-16 dataset", ["ppl", "--dataset", "doc16.txt", *DRY], ["dataset file", "UTF-16 text"], "iconv -f UTF-16",
     ["ppl", "--dataset", "doc16.utf8.txt", "--len", "1k", *DRY]),
    ("utf-16be jsonl dataset", ["ppl", "--dataset", "docs16.jsonl", *DRY], ["UTF-16BE text"], "iconv -f UTF-16BE",
     ["ppl", "--dataset", "docs16.utf8.jsonl", "--len", "4", *DRY]),
    ("utf-16le qa data", ["qa", "--qa-data", "squad16.json", *DRY], ["UTF-16LE text"], "iconv -f UTF-16LE",
     ["qa", "--qa-data", "squad16.utf8.json", "--trials", "2", *DRY]),
    ("utf-16 suite", ["sweep", "s16.toml", *DRY], ["suite file", "UTF-16 text"], "iconv -f UTF-16", ["sweep", "s16.utf8.toml", *DRY]),
    # -- one fault, one message: a column given twice is not "a hand edit?"
    ("column twice", ["report", "dupcol.csv"], ["the column 'metric' twice", "joined side by side"], "remove the second 'metric'",
     ["report", "r.csv"]),
    # -- a suite's errors name its keys, with values TOML takes (the good suite holds the fix's words)
    ("suite trials text", ["sweep", "bad_trials_text.toml", *DRY], ['trials = "x"'], "trials = 4", ["sweep", "good_trials_text.toml", *DRY]),
    ("suite max_trials", ["sweep", "bad_max_trials.toml", *DRY], ["max_trials = 99999"], "max_trials = 10000",
     ["sweep", "good_max_trials.toml", *DRY]),
    ("suite budget", ["sweep", "bad_budget.toml", *DRY], ["budget bounds"], 'trials = "auto"', ["sweep", "good_budget.toml", *DRY]),
    ("suite depths", ["sweep", "bad_depths.toml", *DRY], ["depths places needles"], 'protocol = "exact"', ["sweep", "good_depths.toml", *DRY]),
    ("suite docs", ["sweep", "bad_docs.toml", *DRY], ["docs = 0"], "docs = 4", ["sweep", "good_docs.toml", *DRY]),
    ("suite depths most", ["sweep", "bad_depths_most.toml", *DRY], ["depths = 5000"], "depths = 1000", ["sweep", "good_depths_most.toml", *DRY]),
    ("suite dataset empty", ["sweep", "bad_dataset.toml", *DRY], ["dataset = '' is empty"], "leave dataset out", ["sweep", "good_dataset.toml", *DRY]),
    ("suite metrics twice", ["sweep", "bad_metrics_twice.toml", *DRY], ["metrics name is given twice"], "each metric once",
     ["sweep", "good_metrics_twice.toml", *DRY]),
    ("suite stride", ["sweep", "bad_stride.toml", *DRY], ['stride = "1.5k"'], "4096", ["sweep", "good_stride.toml", *DRY]),
]
ICONV = {"r16.utf8.csv": ("r16.csv", "UTF-16"), "essay16.utf8.txt": ("essay16.txt", "UTF-16"), "doc16.utf8.txt": ("doc16.txt", "UTF-16"),
         "docs16.utf8.jsonl": ("docs16.jsonl", "UTF-16BE"), "squad16.utf8.json": ("squad16.json", "UTF-16LE"),
         "s16.utf8.toml": ("s16.toml", "UTF-16")}  # fmt: skip


@pytest.mark.parametrize(("argv", "words", "hint", "fixed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_one_line_and_its_fix_works(workdir, monkeypatch, capsys, argv, words, hint, fixed):
    before = _snapshot(workdir)
    code, out, err = cli_main(argv, monkeypatch, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], err
    assert "plan " not in out  # refused before any plan
    for word in words:
        assert word in lines[0], (word, lines[0])
    what, fix = lines[0].split(" — ", 1)
    assert hint in fix, (hint, fix)
    if argv[1].startswith("bad_"):  # a suite's user never typed a flag: the message names keys
        assert "--" not in what + fix, lines[0]
    assert _snapshot(workdir) == before  # nothing written, nothing damaged
    for new in fixed:  # the fix applied: convert as it says
        if new in ICONV:
            source, encoding = ICONV[new]
            assert f"iconv -f {encoding} -t UTF-8" in fix
            _iconv(workdir / source, encoding, workdir / new)
    code, out, err = cli_main(fixed, monkeypatch, capsys)
    assert code == 0, err


def test_a_repeated_metrics_flag_keeps_every_value(workdir):
    """``--metrics kl --metrics longppl`` is ``--metrics kl,longppl`` (click kept the last only)."""
    from ctxbench.runner.settings import build_settings
    from ctxbench.tasks import registry

    ppl = registry()["ppl"]
    assert build_settings(ppl, "none", options={"metrics": ["kl", "longppl"]}).metrics == ("longppl", "kl")
    assert build_settings(ppl, "none", options={"metrics": ["kl,longppl"]}).metrics == ("longppl", "kl")


def test_repeated_metrics_plan_both(workdir, monkeypatch, capsys):
    code, one, _ = cli_main(["ppl", "--metrics", "kl,longppl", *DRY], monkeypatch, capsys)
    code2, two, _ = cli_main(["ppl", "--metrics", "kl", "--metrics", "longppl", *DRY], monkeypatch, capsys)
    assert code == code2 == 0 and one.splitlines()[0] == two.splitlines()[0]
    _, kl_only, _ = cli_main(["ppl", "--metrics", "longppl", *DRY], monkeypatch, capsys)
    assert kl_only.splitlines()[0] != two.splitlines()[0]


@pytest.mark.parametrize("spelling", ["--out=~/r.csv", "~/r.csv"])
def test_a_tilde_in_out_is_the_home_folder(workdir, monkeypatch, capsys, spelling):
    argv = ["ppl", *([spelling] if spelling.startswith("--") else ["--out", spelling]), *DRY]
    code, out, err = cli_main(argv, monkeypatch, capsys)
    assert code == 0, err
    assert f"results -> {workdir / 'home' / 'r.csv'}" in out


def test_a_tilde_in_a_suite_and_in_report_paths(workdir, monkeypatch, capsys):
    from ctxbench.results.store import check_writable, read_records
    from ctxbench.runner.suite import load_suite

    shutil.copy(workdir / "r.csv", workdir / "home" / "r.csv")
    (workdir / "home" / "s.toml").write_text('out = "~/out.csv"\n[ppl]\n')
    assert read_records("~/r.csv")
    assert load_suite("~/s.toml").out == "~/out.csv"
    check_writable("~/out.csv")  # the folder is the home folder, which exists
    code, _, err = cli_main(["report", "~/r.csv"], monkeypatch, capsys)
    assert code == 0, err


def test_a_plot_name_too_long_for_the_filesystem_is_shortened_not_a_traceback(tmp_path):
    from ctxbench.tasks.plots import fitting_name

    long = tmp_path / ("passkey-model-" + "yarn(beta_fast=16,beta_slow=2)" * 12 + "-x2.png")
    short = fitting_name(long)
    assert len(short.name.encode()) <= 255 and short.suffix == ".png" and short.name.startswith("passkey-model-yarn")
    assert fitting_name(long.with_name(long.name.replace("x2", "x4"))) != short  # two plots stay apart
    short.write_bytes(b"")  # the filesystem holds it
