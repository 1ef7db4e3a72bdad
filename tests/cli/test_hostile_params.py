"""Hostile inputs (issue 23 item 4): every method parameter, suite key and attention kernel is typed
and checked before anything loads. Each bad value is one line `error: <what> — <fix>` naming the
method (or file), the parameter (or key), the bad value and what it takes; exit code 2; no
traceback; no results file touched. Most cases run `ctxbench.cli.main` in-process (its error
handling included) or call `resolve`/`load_suite`/`check_attn`; a few run the installed command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ctxbench.errors import UserError
from ctxbench.methods import METHODS, resolve
from ctxbench.results.store import COLUMNS
from ctxbench.runner.settings import check_attn, resolve_methods
from ctxbench.runner.suite import load_suite

GEOMETRY = ["--head-dim", "64", "--base", "1e4", "--trained-len", "4k"]  # 32 rotary pairs
PAIRS = 32
OUT = ["--out", "results.csv"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder holding a results file (that no failing command may touch) and LongRoPE factor files."""
    (tmp_path / "results.csv").write_text(",".join(COLUMNS) + "\n" + ",".join(["x"] * len(COLUMNS)) + "\n")
    (tmp_path / "good.json").write_text(json.dumps({"long_factor": [2.0] * PAIRS, "short_factor": [1.0] * PAIRS}))
    (tmp_path / "flat.json").write_text(json.dumps([1.5] * PAIRS))
    (tmp_path / "notjson.json").write_text("long_factor: [1, 2]")
    (tmp_path / "nolong.json").write_text(json.dumps({"short_factor": [1.0] * PAIRS}))
    (tmp_path / "uneven.json").write_text(json.dumps({"long_factor": [2.0] * PAIRS, "short_factor": [1.0] * 8}))
    (tmp_path / "negative.json").write_text(json.dumps({"long_factor": [2.0] * (PAIRS - 1) + [-1.0]}))
    (tmp_path / "text.json").write_text(json.dumps({"long_factor": ["2"] * PAIRS}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / ".cache"))
    return tmp_path


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _run_main(argv, monkeypatch, capsys) -> tuple[int, str]:
    from ctxbench.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxbench", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    return info.value.code, capsys.readouterr().err


def _one_error_line(code, stderr, words) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert " — " in lines[0], stderr  # says how to fix it
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ---- every parameter of every method, through `ctxbench freqs` ----------------------------------
# (method, --param value(s), words the one error line must hold)

PARAM_CASES = [
    # ntk-by-parts: alpha >= 0, beta > 0 and beta > alpha
    ("ntk-by-parts", ["alpha=abc"], ["ntk-by-parts parameter alpha", "'abc'", "a number >= 0"]),
    ("ntk-by-parts", ["alpha=-1"], ["ntk-by-parts parameter alpha", "-1", "must be >= 0"]),
    ("ntk-by-parts", ["alpha=true"], ["parameter alpha", "true is not a number"]),
    ("ntk-by-parts", ["alpha="], ["parameter alpha", "'' is empty"]),
    ("ntk-by-parts", ["beta=0"], ["ntk-by-parts parameter beta", "0 must be > 0"]),
    ("ntk-by-parts", ["beta=NaN"], ["parameter beta", "nan is not a finite number"]),
    ("ntk-by-parts", ["beta=Infinity"], ["parameter beta", "inf is not a finite number"]),
    ("ntk-by-parts", ["alpha=40"], ["ntk-by-parts needs beta > alpha", "alpha=40"]),
    ("ntk-by-parts", ["alpha=4", "beta=4"], ["ntk-by-parts needs beta > alpha", "beta=4"]),
    ("ntk-by-parts", ["beta=[]"], ["ntk-by-parts parameter 'beta'", "empty list"]),
    # yarn: beta_fast > beta_slow > 0, truncate a bool, attention_factor > 0 or auto
    ("yarn", ["beta_fast=abc"], ["yarn parameter beta_fast", "'abc' is not a number", "a number > 0"]),
    ("yarn", ["beta_fast="], ["yarn parameter beta_fast", "'' is empty"]),
    ("yarn", ["beta_fast=0"], ["yarn parameter beta_fast", "0 must be > 0"]),
    ("yarn", ["beta_fast=-32"], ["yarn parameter beta_fast", "-32 must be > 0"]),
    ("yarn", ["beta_fast=-Infinity"], ["yarn parameter beta_fast", "-inf is not a finite number"]),
    ("yarn", ["beta_fast=true"], ["yarn parameter beta_fast", "true is not a number"]),
    ("yarn", ["beta_fast=null"], ["yarn parameter beta_fast", "null is not a number"]),
    ("yarn", ["beta_fast=1e400"], ["yarn parameter beta_fast", "inf is not a finite number"]),
    ("yarn", ["beta_fast=16,16"], ["--param beta_fast lists a value twice"]),
    ("yarn", ["beta_slow=abc"], ["yarn parameter beta_slow", "'abc'"]),
    ("yarn", ["beta_slow=0"], ["yarn parameter beta_slow", "must be > 0"]),
    ("yarn", ["beta_slow=-1"], ["yarn parameter beta_slow", "-1 must be > 0"]),
    ("yarn", ["beta_fast=1"], ["yarn needs beta_fast > beta_slow", "beta_fast=1"]),
    ("yarn", ["beta_slow=64"], ["yarn needs beta_fast > beta_slow", "beta_slow=64"]),
    ("yarn", ["truncate=maybe"], ["yarn parameter truncate", "'maybe' is not true or false"]),
    ("yarn", ["truncate=yes"], ["yarn parameter truncate", "'yes'", "true or false"]),
    ("yarn", ["truncate=1"], ["yarn parameter truncate", "1 is not true or false"]),
    ("yarn", ["truncate=0"], ["yarn parameter truncate", "0 is not true or false"]),
    ("yarn", ["truncate="], ["yarn parameter truncate", "''"]),
    ("yarn", ["truncate=null"], ["yarn parameter truncate", "null"]),
    ("yarn", ["truncate=auto"], ["yarn parameter truncate", "'auto'"]),
    ("yarn", ["attention_factor=abc"], ["yarn parameter attention_factor", "'abc'", "or auto"]),
    ("yarn", ["attention_factor=0"], ["yarn parameter attention_factor", "0 must be > 0"]),
    ("yarn", ["attention_factor=-1.2"], ["yarn parameter attention_factor", "-1.2 must be > 0"]),
    ("yarn", ["attention_factor=NaN"], ["yarn parameter attention_factor", "nan is not a finite number"]),
    ("yarn", ["attention_factor=false"], ["yarn parameter attention_factor", "false is not a number"]),
    ("yarn", ["beta_fats=16"], ["unknown parameter 'beta_fats'", "did you mean 'beta_fast'"]),
    ("yarn", ["window=16"], ["unknown parameter 'window' for method 'yarn'"]),
    # dynamic-yarn shares yarn's declarations
    ("dynamic-yarn", ["beta_fast=x"], ["dynamic-yarn parameter beta_fast", "'x'"]),
    ("dynamic-yarn", ["beta_slow=-1"], ["dynamic-yarn parameter beta_slow", "-1 must be > 0"]),
    ("dynamic-yarn", ["beta_fast=0.5"], ["dynamic-yarn needs beta_fast > beta_slow"]),
    ("dynamic-yarn", ["truncate=false"], ["unknown parameter 'truncate' for method 'dynamic-yarn'"]),
    # llama3: both factors > 0, high > low
    ("llama3", ["low_freq_factor=abc"], ["llama3 parameter low_freq_factor", "'abc'"]),
    ("llama3", ["low_freq_factor=0"], ["llama3 parameter low_freq_factor", "0 must be > 0"]),
    ("llama3", ["low_freq_factor=-1"], ["llama3 parameter low_freq_factor", "-1 must be > 0"]),
    ("llama3", ["low_freq_factor=true"], ["llama3 parameter low_freq_factor", "true is not a number"]),
    ("llama3", ["high_freq_factor=abc"], ["llama3 parameter high_freq_factor", "'abc'"]),
    ("llama3", ["high_freq_factor=0"], ["llama3 parameter high_freq_factor", "0 must be > 0"]),
    ("llama3", ["high_freq_factor=NaN"], ["llama3 parameter high_freq_factor", "nan"]),
    ("llama3", ["high_freq_factor=0.5"], ["llama3 needs high_freq_factor > low_freq_factor", "high_freq_factor=0.5"]),
    ("llama3", ["low_freq_factor=8"], ["llama3 needs high_freq_factor > low_freq_factor", "low_freq_factor=8"]),
    # longrope: factors a list of d/2 numbers > 0 or a JSON file of them; attention_factor > 0
    ("longrope", ["factors=[1,2,3]"], ["longrope factors have 3 entries", f"{PAIRS} rotary pairs"]),
    ("longrope", ["factors=[]"], ["longrope parameter 'factors'", "empty list"]),
    ("longrope", ["factors=[1,-2]"], ["longrope parameter factors", "[1, -2] has -2", "not a number > 0"]),
    ("longrope", ["factors=[1,0]"], ["longrope parameter factors", "has 0"]),
    ("longrope", ['factors=[1,"a"]'], ["longrope parameter factors", "has 'a'"]),
    ("longrope", ["factors=[1,NaN]"], ["longrope parameter factors", "has nan"]),
    ("longrope", ["factors=[1,true]"], ["longrope parameter factors", "has true"]),
    ("longrope", ["factors=missing.json"], ["longrope parameter factors", "'missing.json' is not a file"]),
    ("longrope", ["factors=notjson.json"], ["longrope parameter factors", "'notjson.json' is not a JSON file"]),
    ("longrope", ["factors=nolong.json"], ["longrope parameter factors", "has no 'long_factor'"]),
    ("longrope", ["factors=uneven.json"], ["longrope parameter factors", f"{PAIRS} long_factor numbers but 8 short_factor"]),
    ("longrope", ["factors=negative.json"], ["longrope parameter factors", "has -1.0 in its long_factor"]),
    ("longrope", ["factors=text.json"], ["longrope parameter factors", "has '2' in its long_factor"]),
    ("longrope", ["factors=true"], ["longrope parameter factors", "true is neither a list of numbers nor a file name"]),
    ("longrope", ["factors=12"], ["longrope parameter factors", "12 is neither"]),
    ("longrope", ["factors="], ["longrope parameter factors", "'' is empty"]),
    # longrope knots: a non-decreasing list of numbers > 0, not beside factors
    ("longrope", ["knots=[2,1]"], ["longrope parameter knots", "[2, 1] is not non-decreasing"]),
    ("longrope", ["knots=[]"], ["longrope parameter 'knots'", "empty list"]),
    ("longrope", ["knots=[0,1]"], ["longrope parameter knots", "outside (0,"]),
    ("longrope", ["knots=[1,NaN]"], ["longrope parameter knots", "not a finite number"]),
    ("longrope", ["knots=abc"], ["longrope parameter knots", "'abc' is not a list of numbers"]),
    ("longrope", ["knots=[1,2]", f"factors=[{','.join(['1'] * PAIRS)}]"], ["longrope takes factors or knots, not both"]),
    ("longrope", ["factors=[1,2"], ["bad --param 'factors=[1,2'", "never closed"]),
    ("longrope", ["factors=1,2]"], ["closes nothing"]),
    ("longrope", ["attention_factor=abc"], ["longrope parameter attention_factor", "'abc'"]),
    ("longrope", ["attention_factor=0"], ["longrope parameter attention_factor", "0 must be > 0"]),
    # theta: required, > 1
    ("theta", [], ["method 'theta' needs parameter theta", "a number > 1"]),
    ("theta", ["theta=1"], ["theta parameter theta", "1 must be > 1"]),
    ("theta", ["theta=0.5"], ["theta parameter theta", "0.5 must be > 1"]),
    ("theta", ["theta=-1e6"], ["theta parameter theta", "must be > 1"]),
    ("theta", ["theta=abc"], ["theta parameter theta", "'abc' is not a number"]),
    ("theta", ["theta=Infinity"], ["theta parameter theta", "inf is not a finite number"]),
    ("theta", ["theta=true"], ["theta parameter theta", "true is not a number"]),
    ("theta", ["theta="], ["theta parameter theta", "'' is empty"]),
    ("theta", ["theta=auto"], ["theta parameter theta", "'auto' is not a number"]),
    # ntk-mixed: mixed_b required, > 0
    ("ntk-mixed", [], ["method 'ntk-mixed' needs parameter mixed_b", "a number > 0"]),
    ("ntk-mixed", ["mixed_b=0"], ["ntk-mixed parameter mixed_b", "0 must be > 0"]),
    ("ntk-mixed", ["mixed_b=abc"], ["ntk-mixed parameter mixed_b", "'abc' is not a number"]),
    ("ntk-mixed", ["mixed_b=NaN"], ["ntk-mixed parameter mixed_b", "nan is not a finite number"]),
    # proportional: partial_rotary_factor required, > 0 and <= 1
    ("proportional", [], ["method 'proportional' needs parameter partial_rotary_factor", "a number > 0 and <= 1"]),
    ("proportional", ["partial_rotary_factor=0"], ["proportional parameter partial_rotary_factor", "0 must be > 0"]),
    ("proportional", ["partial_rotary_factor=1.5"], ["proportional parameter partial_rotary_factor", "1.5 must be <= 1"]),
    ("proportional", ["partial_rotary_factor=abc"], ["proportional parameter partial_rotary_factor", "'abc' is not a number"]),
    ("proportional", ["partial_rotary_factor=NaN"], ["proportional parameter partial_rotary_factor", "nan is not a finite"]),
    ("proportional+logn", ["partial_rotary_factor=-1"], ["proportional parameter partial_rotary_factor", "-1 must be > 0"]),
    # ntk-alpha: scaling_alpha required, >= 1
    ("ntk-alpha", [], ["method 'ntk-alpha' needs parameter scaling_alpha", "a number >= 1"]),
    ("ntk-alpha", ["scaling_alpha=0.5"], ["ntk-alpha parameter scaling_alpha", "0.5 must be >= 1"]),
    ("ntk-alpha", ["scaling_alpha=true"], ["ntk-alpha parameter scaling_alpha", "true is not a number"]),
    ("ntk-alpha", ["alpha=1000"], ["unknown parameter 'alpha' for method 'ntk-alpha'", "scaling_alpha"]),
    # ssmax: attn_scale >= 0, floor_scale a length >= 1
    ("ssmax", ["attn_scale=-0.1"], ["ssmax parameter attn_scale", "-0.1 must be >= 0"]),
    ("ssmax", ["attn_scale=abc"], ["ssmax parameter attn_scale", "'abc' is not a number"]),
    ("ssmax", ["floor_scale=0"], ["ssmax parameter floor_scale", "0 must be >= 1"]),
    ("ssmax", ["floor_scale=2.5"], ["ssmax parameter floor_scale", "2.5 is not a whole number"]),
    ("yarn+ssmax", ["floor_scale=abc"], ["ssmax parameter floor_scale", "'abc' is not a length"]),
    ("rerope+ssmax", ["attn_scale=Infinity"], ["ssmax parameter attn_scale", "inf is not a finite number"]),
    # rerope: window a length >= 1
    ("rerope", ["window=0"], ["rerope parameter window", "0 must be >= 1", "a length in tokens"]),
    ("rerope", ["window=-5"], ["rerope parameter window", "-5 must be >= 1"]),
    ("rerope", ["window=abc"], ["rerope parameter window", "'abc' is not a length"]),
    ("rerope", ["window=2q"], ["rerope parameter window", "'2q' is not a length"]),
    ("rerope", ["window=2.5"], ["rerope parameter window", "2.5 is not a whole number"]),
    ("rerope", ["window=true"], ["rerope parameter window", "true is not a whole number"]),
    ("rerope", ["window="], ["rerope parameter window", "'' is empty"]),
    ("rerope", ["window=0k"], ["rerope parameter window", "'0k' is not a length"]),
    ("ntk+rerope", ["window=0"], ["rerope parameter window", "0 must be >= 1"]),
    # leaky-rerope: window as rerope, k >= 1
    ("leaky-rerope", ["k=0.5"], ["leaky-rerope parameter k", "0.5 must be >= 1"]),
    ("leaky-rerope", ["k=0"], ["leaky-rerope parameter k", "0 must be >= 1"]),
    ("leaky-rerope", ["k=-2"], ["leaky-rerope parameter k", "-2 must be >= 1"]),
    ("leaky-rerope", ["k=abc"], ["leaky-rerope parameter k", "'abc' is not a number"]),
    ("leaky-rerope", ["k=true"], ["leaky-rerope parameter k", "true is not a number"]),
    ("leaky-rerope", ["k=NaN"], ["leaky-rerope parameter k", "nan is not a finite number"]),
    ("leaky-rerope", ["window=-1"], ["leaky-rerope parameter window", "-1 must be >= 1"]),
    # self-extend: window as rerope, group a whole number >= 1
    ("self-extend", ["group=0"], ["self-extend parameter group", "0 must be >= 1", "a whole number"]),
    ("self-extend", ["group=-1"], ["self-extend parameter group", "-1 must be >= 1"]),
    ("self-extend", ["group=2.5"], ["self-extend parameter group", "2.5 is not a whole number"]),
    ("self-extend", ["group=abc"], ["self-extend parameter group", "'abc' is not a whole number"]),
    ("self-extend", ["group=true"], ["self-extend parameter group", "true is not a whole number"]),
    ("self-extend", ["group=Infinity"], ["self-extend parameter group", "inf is not a whole number"]),
    ("self-extend", ["window=1.5"], ["self-extend parameter window", "1.5 is not a whole number"]),
    ("self-extend+logn", ["group=0"], ["self-extend parameter group", "0 must be >= 1"]),
    # string: window (S) a length >= 1, local_value (W) a length >= 0 and <= S (checked once S is known)
    ("string", ["window=0"], ["string parameter window", "0 must be >= 1", "shifted_offset"]),
    ("string", ["window=abc"], ["string parameter window", "'abc' is not a length"]),
    ("string", ["local_value=-1"], ["string parameter local_value", "-1 must be >= 0", "a length in tokens"]),
    ("string", ["local_value=1.5"], ["string parameter local_value", "1.5 is not a whole number"]),
    ("string", ["local_value="], ["string parameter local_value", "'' is empty"]),
    ("yarn+string+logn", ["local_value=true"], ["string parameter local_value", "true is not a whole"]),
    ("dca", ["chunk_size=0"], ["dca parameter chunk_size", "0 must be >= 1", "a length in tokens"]),
    ("dca", ["chunk_size=abc"], ["dca parameter chunk_size", "'abc' is not a length"]),
    ("dca", ["local_window=-1"], ["dca parameter local_window", "-1 must be >= 0", "local_size"]),
    ("ntk+dca", ["local_window="], ["dca parameter local_window", "'' is empty"]),
    # ms-poe: ratios >= 1 with ratio_max > ratio_min, first_layer a whole number >= 0, head_order and keys choices
    ("ms-poe", ["ratio_min=0.5"], ["ms-poe parameter ratio_min", "0.5 must be >= 1", "compress_ratio_min"]),
    ("ms-poe", ["ratio_min=abc"], ["ms-poe parameter ratio_min", "'abc' is not a number"]),
    ("ms-poe", ["ratio_max=1.2"], ["ms-poe needs ratio_max > ratio_min", "ratio_max=1.2"]),
    ("ms-poe", ["ratio_max=NaN"], ["ms-poe parameter ratio_max", "nan is not a finite number"]),
    ("ms-poe", ["first_layer=-1"], ["ms-poe parameter first_layer", "-1 must be >= 0", "apply_layers"]),
    ("ms-poe", ["first_layer=2.5"], ["ms-poe parameter first_layer", "2.5 is not a whole number"]),
    ("ms-poe", ["head_order=normal"], ["ms-poe parameter head_order", "'normal' is not one of the choices"]),
    ("ntk+ms-poe", ["head_order=outlyer"], ["ms-poe parameter head_order", "did you mean 'outlier'"]),
    ("ms-poe", ["keys=group_first"], ["ms-poe parameter keys", "did you mean 'group-first'"]),
    # methods without parameters take none
    ("ntk", ["alpha=1"], ["unknown parameter 'alpha' for method 'ntk'", "its parameters are: none"]),
    ("logn", ["window=16"], ["unknown parameter 'window' for method 'logn'"]),
]


def _param_argv(method, params):
    return [arg for p in params for arg in ("--param", p)]


@pytest.mark.parametrize("method,params,words", PARAM_CASES, ids=[f"{m}:{'&'.join(p) or 'none'}" for m, p, _ in PARAM_CASES])
def test_bad_parameter_value_is_one_error_line_in_freqs(workdir, monkeypatch, capsys, method, params, words):
    before = _snapshot(workdir)
    code, stderr = _run_main(["freqs", "--method", method, *_param_argv(method, params), *GEOMETRY], monkeypatch, capsys)
    _one_error_line(code, stderr, words)
    assert _snapshot(workdir) == before


# The same check on the paths that run a model (`ppl --dry-run`) and export one: it is resolve's,
# so they say the same; the results file is untouched.
RUN_CASES = [
    ("yarn", ["beta_fast=abc"], ["yarn parameter beta_fast", "'abc'"]),
    ("yarn", ["truncate=maybe"], ["yarn parameter truncate", "'maybe'"]),
    ("yarn", ["beta_fast=1"], ["yarn needs beta_fast > beta_slow"]),
    ("rerope", ["window=0"], ["rerope parameter window", "0 must be >= 1"]),
    ("leaky-rerope", ["k=0.5"], ["leaky-rerope parameter k"]),
    ("self-extend", ["group=-1"], ["self-extend parameter group"]),
    ("theta", [], ["method 'theta' needs parameter theta"]),
    ("longrope", ["factors=missing.json"], ["longrope parameter factors", "'missing.json' is not a file"]),
    ("llama3", ["high_freq_factor=0.5"], ["llama3 needs high_freq_factor > low_freq_factor"]),
    ("none,yarn", ["beta_fast=NaN"], ["yarn parameter beta_fast", "nan"]),
    ("ms-poe", ["first_layer=-2"], ["ms-poe parameter first_layer", "-2 must be >= 0"]),
]


@pytest.mark.parametrize("method,params,words", RUN_CASES, ids=[f"{m}:{'&'.join(p) or 'none'}" for m, p, _ in RUN_CASES])
def test_bad_parameter_value_stops_a_dry_run_before_the_plan(workdir, monkeypatch, capsys, method, params, words):
    before = _snapshot(workdir)
    argv = ["ppl", "--dry-run", "--method", method, *_param_argv(method, params), "--len", "1k", *OUT]
    code, stderr = _run_main(argv, monkeypatch, capsys)
    _one_error_line(code, stderr, words)
    assert _snapshot(workdir) == before


EXPORT_CASES = [
    ("yarn", "transformers", ["truncate=maybe"], ["yarn parameter truncate"]),
    ("yarn", "vllm", ["attention_factor=0"], ["yarn parameter attention_factor", "0 must be > 0"]),
    ("yarn", "llamacpp", ["beta_slow=-1"], ["yarn parameter beta_slow"]),
    ("llama3", "vllm", ["low_freq_factor=8"], ["llama3 needs high_freq_factor > low_freq_factor"]),
    ("theta", "llamacpp", ["theta=1"], ["theta parameter theta", "1 must be > 1"]),
    ("longrope", "transformers", ["factors=[1,2,3]"], ["longrope factors have 3 entries"]),
    ("rerope", "json", ["window=abc"], ["rerope parameter window"]),
    ("string", "json", ["local_value=2k"],
     ["string local_value 2048 must be <= window 1351", "local_value=N"]),  # fmt: skip
    ("string", "json", ["window=100", "local_value=101"], ["string local_value 101 must be <= window 100"]),
    ("string", "vllm", ["window=0"], ["string parameter window", "0 must be >= 1"]),
    ("dca", "json", ["chunk_size=512", "local_window=512"], ["dca local_window 512 must be < chunk_size 512", "local_window=N"]),
    ("dca", "json", ["local_window=1.5"], ["dca parameter local_window", "1.5 is not a whole number"]),
    ("proportional", "transformers", ["partial_rotary_factor=2"], ["proportional parameter partial_rotary_factor", "2 must be <= 1"]),
    ("ms-poe", "json", ["ratio_max=1"], ["ms-poe needs ratio_max > ratio_min"]),
    ("ms-poe", "vllm", [], ["vllm cannot express method 'ms-poe'", "per-head positions"]),
]


@pytest.mark.parametrize("method,engine,params,words", EXPORT_CASES, ids=[f"{m}-{e}" for m, e, _, _ in EXPORT_CASES])
def test_bad_parameter_value_is_one_error_line_in_export(workdir, monkeypatch, capsys, method, engine, params, words):
    argv = ["export", "--method", method, "--to", engine, *_param_argv(method, params), *GEOMETRY]
    code, stderr = _run_main(argv, monkeypatch, capsys)
    _one_error_line(code, stderr, words)


def test_every_declared_parameter_has_a_hostile_case():
    covered = {(part, p.split("=")[0]) for m, params, _ in PARAM_CASES for p in params for part in m.split("+")}
    covered |= {("theta", "theta")}
    declared = {(name, p.name) for name, m in METHODS.items() for p in m.declared}
    assert declared - covered == set()


# ---- the Python API and suites go through the same check ------------------------------------


@pytest.mark.parametrize("params,words", [
    ({"beta_fast": "16"}, ["yarn parameter beta_fast", "'16' is not a number"]),  # typed: text is not a number
    ({"truncate": "false"}, ["yarn parameter truncate", "'false'"]),
    ({"truncate": 1}, ["yarn parameter truncate", "1 is not true or false"]),
    ({"beta_fast": [16, 32], "beta_slow": float("inf")}, ["yarn parameter beta_slow", "inf"]),
])  # fmt: skip
def test_python_api_params_are_checked_like_the_cli(params, words):
    with pytest.raises(UserError) as info:
        resolve_methods("yarn", params)
    assert all(word in info.value.line() for word in words), info.value.line()


# ---- suites -------------------------------------------------------------------------------------

SECTION = '[ppl]\nlengths = ["1k"]\n'
YARN = '[[methods]]\nname = "yarn"\n'

SUITE_CASES = [
    # top-level keys: typed
    ('trust_remote_code = "no"\n' + SECTION, ['trust_remote_code = "no" is a string, not a boolean', "true or false"]),
    ('trust_remote_code = "true"\n' + SECTION, ['trust_remote_code = "true"', "not a boolean"]),
    ("trust_remote_code = 1\n" + SECTION, ["trust_remote_code = 1 is an integer", "not a boolean"]),
    ('seed = "3"\n' + SECTION, ['seed = "3" is a string, not an integer', "seed = 0"]),
    ("seed = 1.5\n" + SECTION, ["seed = 1.5 is a float, not an integer"]),
    ("seed = true\n" + SECTION, ["seed = true is a boolean, not an integer"]),
    ("seed = -1\n" + SECTION, ["seed = -1 is negative"]),
    ('model = ""\n' + SECTION, ['model = "" is empty']),
    ("model = 3\n" + SECTION, ["model = 3 is an integer, not text"]),
    ('model = ["a"]\n' + SECTION, ['model = ["a"] is a list, not text']),
    ('device = "gpu"\n' + SECTION, ['unknown device = "gpu"', "auto, cpu, cuda, cuda:N"]),
    ('device = "cuda:x"\n' + SECTION, ['unknown device = "cuda:x"']),
    ('device = ""\n' + SECTION, ['device = "" is empty']),
    ("device = 0\n" + SECTION, ["device = 0 is an integer, not text"]),
    ('dtype = "fp16"\n' + SECTION, ['unknown dtype = "fp16"', "float16"]),
    ('dtype = "float64"\n' + SECTION, ['unknown dtype = "float64"', "did you mean"]),
    ("dtype = true\n" + SECTION, ["dtype = true is a boolean, not text"]),
    ('attn = "sdp"\n' + SECTION, ["unknown attn kernel 'sdp'", "did you mean 'sdpa'"]),
    ('attn = "flash_attn"\n' + SECTION, ["unknown attn kernel 'flash_attn'", "did you mean"]),
    ('device = "cpu"\nattn = "flash_attention_2"\n' + SECTION, ['attn = "flash_attention_2" needs a CUDA GPU', 'device = "cpu"', 'use attn = "sdpa"']),
    ('attn = ""\n' + SECTION, ['attn = "" is empty']),
    ("attn = 2\n" + SECTION, ["attn = 2 is an integer, not text"]),
    ('out = ""\n' + SECTION, ['out = "" is empty']),
    ("out = 5\n" + SECTION, ["out = 5 is an integer, not text"]),
    # [[methods]]
    ("methods = []\n" + SECTION, ["methods = [] lists no method"]),
    ('methods = "yarn"\n' + SECTION, ['methods = "yarn" is a string, not [[methods]] tables']),
    ('[methods]\nname = "yarn"\n' + SECTION, ["[methods] is one table", "[[methods]]"]),
    ('methods = ["yarn"]\n' + SECTION, ['[[methods]] entry 1 is "yarn", not a table']),
    ("[[methods]]\nname = 3\n" + SECTION, ["[[methods]] entry 1 has name = 3"]),
    ('[[methods]]\nname = ""\n' + SECTION, ['[[methods]] entry 1 has name = ""']),
    ('[[methods]]\nlabel = "x"\n' + SECTION, ["[[methods]] entry 1 has no name"]),
    (YARN + "params = 3\n" + SECTION, ["[[methods]] entry 1 has params = 3, not a table"]),
    (YARN + 'label = ""\n' + SECTION, ['[[methods]] entry 1 has label = ""']),
    (YARN + "label = 7\n" + SECTION, ["[[methods]] entry 1 has label = 7"]),
    (YARN + YARN + SECTION, ["method 'yarn' is given twice ([[methods]] entries 1 and 2)", "list each method once"]),
    (YARN + YARN + "params = { beta_fast = 32 }\n" + SECTION, ["method 'yarn' is given twice ([[methods]] entries 1 and 2)"]),
    (YARN + "params = { beta_fast = [16, 16] }\n" + SECTION, ["is given twice ([[methods]] entry 1)"]),
    (YARN + 'label = "a"\n' + YARN + 'label = "b"\n' + SECTION, ["method 'b' (also labelled 'a') is given twice"]),
    (YARN + 'params = { truncate = "no" }\n' + SECTION, ["[[methods]] entry 1", "yarn parameter truncate", "'no'"]),
    (YARN + 'params = { beta_fast = "16" }\n' + SECTION, ["yarn parameter beta_fast", "'16' is not a number"]),
    (YARN + "params = { beta_fast = nan }\n" + SECTION, ["yarn parameter beta_fast", "nan is not a finite number"]),
    (YARN + "params = { beta_fast = [] }\n" + SECTION, ["yarn parameter 'beta_fast' has an empty list"]),
    ('[[methods]]\nname = "rerope"\nparams = { window = 0 }\n' + SECTION, ["rerope parameter window", "0 must be >= 1"]),
    ('[[methods]]\nname = "theta"\n' + SECTION, ["method 'theta' needs parameter theta"]),
    ('[[methods]]\nname = "longrope"\nparams = { factors = "missing.json" }\n' + SECTION, ["longrope parameter factors", "not a file"]),
    # task sections: factors, lengths, methods
    ("[ppl]\nfactors = []\n", ["factors = [] in [ppl] is an empty list", "factors = [2, 4]"]),
    ("[ppl]\nfactors = 2\n", ["factors = 2 in [ppl] is an integer, not a list"]),
    ('[ppl]\nfactors = ["2"]\n', ['factors in [ppl] has "2", a string']),
    ("[ppl]\nfactors = [true]\n", ["factors in [ppl] has true, a boolean"]),
    ("[ppl]\nlengths = []\n", ["lengths = [] in [ppl] is an empty list"]),
    ('[ppl]\nlengths = "1k"\n', ['lengths = "1k" in [ppl] is a string, not a list']),
    ("[ppl]\nlengths = [true]\n", ["lengths in [ppl] has true, a boolean"]),
    ("[ppl]\nlengths = [1.5]\n", ["bad lengths in [ppl]", "1.5"]),
    ('[ppl]\nmethods = []\nlengths = ["1k"]\n', ["methods = [] in [ppl] lists no method"]),
    ('[ppl]\nmethods = "none"\nlengths = ["1k"]\n', ['methods = "none" in [ppl] is a string, not a list of names']),
    ('[ppl]\nmethods = [1]\nlengths = ["1k"]\n', ["methods in [ppl] has 1, not a name"]),
    ('[ppl]\nmethods = ["none", "none"]\nlengths = ["1k"]\n', ["methods in [ppl] lists 'none' twice"]),
    ('[[ppl]]\nlengths = ["1k"]\n', ["[ppl] must be a table"]),
]


@pytest.mark.parametrize("text,words", SUITE_CASES, ids=[f"suite{i}" for i in range(len(SUITE_CASES))])
def test_bad_suite_is_one_error_naming_the_file_key_and_value(workdir, text, words):
    path = workdir / "suite.toml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_suite(path)
    line = info.value.line()
    assert "\n" not in line and line.startswith(f"error: {path}: "), line
    assert " — " in line
    for word in words:
        assert word in line, (word, line)


# ---- --attn -------------------------------------------------------------------------------------

ATTN_CASES = [
    ("sdp", "cpu", ["unknown --attn kernel 'sdp'", "did you mean 'sdpa'"]),
    ("flash_attention2", "cpu", ["unknown --attn kernel 'flash_attention2'", "did you mean 'flash_attention_2'"]),
    ("", "cpu", ["unknown --attn kernel ''", "choose one of: sdpa"]),
    ("SDPA", "auto", ["unknown --attn kernel 'SDPA'"]),
    ("paged|eager", "cpu", ["unknown --attn kernel 'paged|eager'"]),
    ("flash_attention_2", "cpu", ["--attn flash_attention_2 needs a CUDA GPU", "--device cpu", "use --attn sdpa"]),
    ("flash_attention_3", "cpu", ["--attn flash_attention_3 needs a CUDA GPU", "use --attn sdpa"]),
]


@pytest.mark.parametrize("attn,device,words", ATTN_CASES, ids=[f"{a or 'empty'}-{d}" for a, d, _ in ATTN_CASES])
def test_bad_attn_is_one_error_line(attn, device, words):
    with pytest.raises(UserError) as info:
        check_attn(attn, device)
    line = info.value.line()
    assert "\n" not in line and " — " in line
    assert all(word in line for word in words), line


def test_flash_attention_without_its_package_says_to_use_sdpa(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("flash_attn", "kernels") else real(name, *a))
    with pytest.raises(UserError, match="needs the 'flash_attn' package, which is not installed — use --attn sdpa"):
        check_attn("flash_attention_2", "cuda")


def test_flash_attention_on_auto_without_a_gpu_says_none_is_visible(monkeypatch):
    import importlib.util

    import torch

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "flash_attn" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="needs a CUDA GPU, and none is visible"):
        check_attn("flash_attention_2", "auto")


def test_flash_attention_with_its_package_on_cuda_is_accepted(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "flash_attn" else real(name, *a))
    check_attn("flash_attention_2", "cuda:0")


@pytest.mark.parametrize("attn", [None, "sdpa", "eager", "flex_attention"])
def test_kernels_that_run_anywhere_are_accepted_on_the_cpu(attn):
    check_attn(attn, "cpu")


@pytest.mark.integration
def test_checking_sdpa_imports_no_torch():
    code = "import sys; from ctxbench.runner.settings import check_attn; check_attn('sdpa', 'auto'); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


# ---- good values still work ---------------------------------------------------------------------


def test_truncate_false_resolves_to_false_and_names_the_entry():
    (setting,) = resolve_methods("yarn", {"truncate": False})
    assert setting.param_dict["truncate"] is False and setting.label == "yarn(truncate=false)"


def test_auto_and_lengths_are_read_for_the_declared_kind():
    setting = resolve("self-extend", {"window": "2k", "group": "auto"})
    assert setting.param_dict == {"window": 2048, "group": None}
    assert resolve("self-extend", {"group": 4.0}).param_dict["group"] == 4  # a whole float is a whole number
    assert resolve("leaky-rerope", {"k": 1}).param_dict["k"] == 1  # k = 1 is plain RoPE: allowed, as group = 1


def test_a_bracketed_factor_list_is_one_value_not_a_grid(workdir, monkeypatch, capsys):
    factors = "[" + ",".join(["1", "1.5"] * (PAIRS // 2)) + "]"  # repeated values are fine inside one list
    from ctxbench.cli import main

    monkeypatch.setattr(sys, "argv", ["ctxbench", "freqs", "--method", "longrope", "--param", f"factors={factors}",
                                      "--factor", "2", "--len", "1k", "--format", "csv", *GEOMETRY])  # fmt: skip
    main()  # no SystemExit: success
    rows = capsys.readouterr().out.strip().splitlines()[1:]
    assert len(rows) == PAIRS and {r.split(",")[0] for r in rows} == {"longrope(factors=" + "|".join(["1", "1.5"] * (PAIRS // 2)) + ")"}


def test_factor_files_are_a_grid_and_a_file_runs(workdir):
    settings = resolve_methods("longrope", {"factors": ["good.json", "flat.json"]})
    assert [s.param_dict["factors"] for s in settings] == ["good.json", "flat.json"]
    from ctxbench.methods.freqplot import freq_rows
    from ctxbench.model.geometry import RopeGeometry

    geom = RopeGeometry(head_dim=64, rotary_dim=64, base=1e4, trained_len=4096)
    rows = freq_rows("longrope", geom, 2.0, 8192, {"factors": "good.json"})
    assert [r["scale"] for r in rows] == pytest.approx([2.0] * PAIRS)  # long factors past L


def test_a_suite_with_typed_values_loads(workdir):
    path = workdir / "suite.toml"
    path.write_text(
        'model = "smollm2-135m"\ndevice = "cuda:1"\ndtype = "bfloat16"\nattn = "eager"\nseed = 3\nout = "r.csv"\n'
        'trust_remote_code = true\n[[methods]]\nname = "longrope"\nparams = { factors = ' + json.dumps([1.5] * PAIRS) + ' }\n'
        '[[methods]]\nname = "yarn"\nparams = { truncate = false, beta_fast = [16, 32] }\n[ppl]\nlengths = ["1k"]\nmethods = ["longrope", "yarn"]\n'
    )  # fmt: skip
    suite = load_suite(path)
    assert (suite.device, suite.dtype, suite.attn, suite.seed, suite.trust_remote_code) == ("cuda:1", "bfloat16", "eager", 3, True)
    methods = suite.jobs[0].settings.methods
    assert len(methods) == 3 and len(methods[0].param_dict["factors"]) == PAIRS  # a list of numbers: one value, not 32 entries


def test_methods_table_shows_each_parameters_type_and_range(monkeypatch, capsys):
    from ctxbench.cli import main

    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(sys, "argv", ["ctxbench", "methods"])
    main()
    out = capsys.readouterr().out
    for text in ("beta_fast=32: a number > 0 and > beta_slow", "truncate=true: true or false", "theta=required: a number > 1",
                 "group=auto: a whole number >= 1", "window=auto: a length in tokens >= 1"):  # fmt: skip
        assert text in out, text


# ---- end to end, through the installed command ----------------------------------------------

SUBPROCESS_CASES = [
    (["freqs", "--method", "yarn", "--param", "truncate=maybe", *GEOMETRY], ["yarn parameter truncate", "'maybe'"]),
    (["ppl", "--dry-run", "--method", "self-extend", "--param", "group=0", *OUT], ["self-extend parameter group"]),
    (["export", "--method", "yarn", "--to", "vllm", "--param", "beta_fast=", *GEOMETRY], ["yarn parameter beta_fast", "'' is empty"]),
    (["sweep", "hostile.toml", *OUT], ['trust_remote_code = "no" is a string, not a boolean']),
]


@pytest.mark.integration
@pytest.mark.parametrize("argv,words", SUBPROCESS_CASES, ids=[a[0] for a, _ in SUBPROCESS_CASES])
def test_installed_command_gives_the_same_one_line_error(workdir, argv, words):
    (workdir / "hostile.toml").write_text('trust_remote_code = "no"\n[ppl]\nlengths = ["1k"]\n')
    before = _snapshot(workdir)
    proc = subprocess.run([sys.executable, "-m", "ctxbench", *argv], cwd=workdir, capture_output=True, text=True, timeout=120)
    _one_error_line(proc.returncode, proc.stderr, words)
    assert _snapshot(workdir) == before


def test_a_choice_parameter_takes_only_its_choices():
    from ctxbench.methods import Param

    mode = Param("mode", "fast", "choice", "how to round", choices=("fast", "exact"))
    assert mode.check("exact", "m") == "exact"
    with pytest.raises(UserError, match="bad value for m parameter mode: 'exakt' is not one of the choices .did you mean 'exact'"):
        mode.check("exakt", "m")
