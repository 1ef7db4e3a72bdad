"""`ctxbench show-prompt ROW-ID`: the prompt of one trial, rebuilt from its row, is token for token the
one a fresh run of the task gives the model. A scripted fake model answers each rebuilt prompt with a
marker of its own and nothing else: a fresh run's trial answers its marker only if the model saw
exactly that prompt (the same ids, no token more or less)."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, byte_tokenizer, cli_main, one_error_line, run_settings, scripted_lm

from ctxbench.errors import UserError
from ctxbench.results.rowid import numbered
from ctxbench.runner.settings import build_settings
from ctxbench.runner.showprompt import prompt_ids
from ctxbench.tasks import get, registry

pytestmark = pytest.mark.usefixtures("one_thread")

QA = f"qa_1={DATA / 'qa' / 'squad-dev-v2.0-mini.json'},qa_2={DATA / 'qa' / 'hotpot-dev-distractor-mini.json'}"
# task options, lengths, and the options the rows do not record (the data digest does) that show-prompt is given
CASES = {
    "passkey": ({"depths": "0,0.5,1", "trials": "2"}, "300,400", {}),
    "niah": ({"variants": "single_1,multikey_1", "trials": "2"}, "700", {}),  # RULER's protocol: random needle places
    "niah exact": ({"variants": "single_2", "depths": "0.2,0.8", "trials": "2", "protocol": "exact"}, "600", {}),
    "qa": ({"qa_data": QA, "trials": "2"}, "1500", {"qa_data": QA}),  # two data sets, one digest per variant
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_trials_rebuilt_prompt_is_the_one_a_fresh_run_feeds_the_model(case, tokenizer, tmp_path):
    task = case.split()[0]
    options, lengths, given = CASES[case]
    settings = build_settings(get(task), "none,yarn", 2.0, lengths, options)
    lm = scripted_lm(tokenizer, {})
    out = tmp_path / "run.csv"
    run_settings(lm, task, settings, out=out, seed=7)
    trial_rows = [(rid, r) for rid, r in numbered(str(out)) if r["trial"].isdigit()]
    script, marker = {}, {}
    for rid, row in trial_rows:
        ids = prompt_ids(row, lm, registry(), given)
        assert len(ids) == int(row["tokens"])
        marker[rid] = script.setdefault(ids, f"@{len(script)}#")  # one marker per prompt: both methods see the same
    assert len(script) == len(trial_rows) // 2 >= 4  # and every trial of a method its own

    answers = {ids: tuple(tokenizer(m, add_special_tokens=False)["input_ids"]) for ids, m in script.items()}
    fresh = run_settings(scripted_lm(tokenizer, answers), task, settings, seed=7).records

    def at(r):
        return r["variant"], r["label"], r["length"], r["depth"], r["trial"]

    assert {at(r): marker[rid] for rid, r in trial_rows} == {at(r): r["answer"] for r in fresh if r["trial"].isdigit()}


def test_the_command_prints_the_prompt_and_its_ids_from_a_row_id(saved_model, tmp_path, monkeypatch, capsys):
    from ctxbench.tasks.passkey import build_prompt, draw_key

    out = tmp_path / "p.csv"
    code, _, stderr = cli_main(["passkey", "--model", str(saved_model), "--len", "300", "--depths", "0.5", "--trials", "2",
                                "--seed", "5", "--dtype", "float32", "--device", "cpu", "--out", str(out)], monkeypatch, capsys)  # fmt: skip
    assert code == 0, stderr
    rows = numbered(str(out))
    rid = next(rid for rid, r in rows if r["trial"] == "1")
    number = f"{out}:{[r['trial'] for _, r in rows].index('1') + 1}"  # the same row by its number
    reference = build_prompt(byte_tokenizer(), 300, 0.5, draw_key(5, 300, 0.5, 1, 5)).ids  # the task's builder, called as a run calls it
    code, stdout, stderr = cli_main(["show-prompt", rid, "--model", str(saved_model), "--ids"], monkeypatch, capsys)
    assert code == 0, stderr
    assert tuple(json.loads(stdout)) == reference
    code, stdout, _ = cli_main(["show-prompt", number, "--model", str(saved_model)], monkeypatch, capsys)
    assert code == 0 and stdout == byte_tokenizer().decode(list(reference)) + "\n"


def _one_run(tokenizer, tmp_path):
    settings = build_settings(get("passkey"), "none", 2.0, "300", {"depths": "0.5", "trials": "1"})
    out = tmp_path / "run.csv"
    run_settings(scripted_lm(tokenizer, {}), "passkey", settings, out=out)
    return out, numbered(str(out))


@pytest.mark.parametrize("wrong", ["not an id", "an unknown key", "past the end", "an aggregate row"])
def test_an_id_that_names_no_trial_gets_one_line(wrong, tokenizer, tmp_path, monkeypatch, capsys):
    out, rows = _one_run(tokenizer, tmp_path)
    rid, words = {
        "not an id": (str(out), ["is not a row id", "FILE@KEY", "FILE:N"]),
        "an unknown key": (f"{out}@0123456789ab", ["holds no row @0123456789ab"]),
        "past the end": (f"{out}:{len(rows) + 1}", [f"has {len(rows)} row(s)"]),
        "an aggregate row": (next(rid for rid, r in rows if r["trial"] == "all"), ["is not a trial row"]),
    }[wrong]
    code, stdout, stderr = cli_main(["show-prompt", rid], monkeypatch, capsys)
    one_error_line(code, stderr, words)
    assert stdout == ""


@pytest.mark.parametrize("column", ["model_digest", "data_digest", "tokens"])
def test_a_row_the_rebuilt_prompt_does_not_match_is_refused(column, tokenizer, tmp_path):
    _, rows = _one_run(tokenizer, tmp_path)
    row = dict(next(r for _, r in rows if r["trial"] == "0"))
    row[column] = {"model_digest": "sha256:0000", "data_digest": "sha256:1111", "tokens": "299"}[column]
    with pytest.raises(UserError, match={"model_digest": "digest", "data_digest": "data", "tokens": "tokens"}[column]):
        prompt_ids(row, scripted_lm(tokenizer, {}), registry())
