"""Parameter ranges that mean something, and the numbers a method computes checked before any model
loads (issue 37: values inside the documented ranges overflowed, printed ``Infinity`` in an export,
left nothing to rotate). Each bad value is one line ``error: <what> — <fix>`` with exit code 2 from
``ctxbench freqs`` or ``ctxbench export`` run in-process, and the fix it suggests, applied to the
same command, is accepted. The mechanism tests at the end hold every declared parameter to a finite
range and every value of it, at its ends, to a clean answer (no traceback, no ``Infinity``)."""

from __future__ import annotations

import json
import math
import re

import pytest
from helpers import cli_main, one_error_line

from ctxbench.errors import UserError
from ctxbench.methods import METHODS, check_derived, resolve
from ctxbench.model.geometry import RopeGeometry
from ctxbench.parsing import MOST_FACTOR

GEOMETRY = ["--head-dim", "64", "--base", "1e4", "--trained-len", "4k"]  # d = 64 (32 pairs), b = 1e4, L = 4096
PAIRS = 32


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "flat.json").write_text(json.dumps([1.5] * PAIRS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path





def _argv(command, method, params, factor, engine):
    argv = [command, "--method", method, "--factor", factor, *[a for p in params for a in ("--param", p)], *GEOMETRY]
    return argv + (["--to", engine] if engine else [])


def _apply_fix(line: str, params: list[str], factor: str) -> tuple[list[str], str]:
    """The command's parameters and factor with the fix the error suggests applied: ``e.g. NAME=V``
    (a parameter), ``e.g. factor V`` or ``use e.g. V`` (the factor)."""
    fix = line.split(" — ", 1)[1]
    if m := re.search(r"e\.g\. factor (\S+)$", fix):
        return params, m.group(1)
    if m := re.search(r"(?:use e\.g\.|such as) (\d+)", fix):
        return params, m.group(1)
    m = re.search(r"e\.g\. (\w+)=(\S+)$", fix)
    assert m, f"no fix to apply in: {fix}"
    name, value = m.groups()
    return [p for p in params if p.split("=")[0] != name] + [f"{name}={value}"], factor


# (command, method, --param values, --factor, engine, words the one error line must hold)
CASES = [
    # declared ranges: every number has a finite end that means something for what it counts
    ("freqs", "yarn", ["beta_fast=1e308"], "2", None, ["yarn parameter beta_fast", "must be <= 1e+06"]),
    ("freqs", "yarn", ["beta_slow=2e6"], "2", None, ["yarn parameter beta_slow", "must be <= 1e+06"]),
    ("freqs", "dynamic-yarn", ["beta_fast=1e7"], "2", None, ["dynamic-yarn parameter beta_fast", "must be <= 1e+06"]),
    ("freqs", "ntk-by-parts", ["alpha=1e300"], "2", None, ["ntk-by-parts parameter alpha", "must be <= 1e+06"]),
    ("freqs", "ntk-by-parts", ["beta=1e9"], "2", None, ["ntk-by-parts parameter beta", "must be <= 1e+06"]),
    ("freqs", "yarn", ["attention_factor=100"], "2", None, ["yarn parameter attention_factor", "must be <= 10"]),
    ("freqs", "longrope", ["factors=flat.json", "attention_factor=1e5"], "2", None,
     ["longrope parameter attention_factor", "must be <= 10"]),  # fmt: skip
    ("freqs", "llama3", ["low_freq_factor=1e7"], "2", None, ["llama3 parameter low_freq_factor", "must be <= 1e+06"]),
    ("freqs", "llama3", ["high_freq_factor=1e300"], "2", None, ["llama3 parameter high_freq_factor", "must be <= 1e+06"]),
    ("freqs", "theta", ["theta=1e300"], "2", None, ["theta parameter theta", "must be <= 1e+12"]),
    ("freqs", "theta", ["theta=1e13"], "2", None, ["theta parameter theta", "must be <= 1e+12"]),
    ("freqs", "ntk-mixed", ["mixed_b=200"], "2", None, ["ntk-mixed parameter mixed_b", "must be <= 10"]),
    ("freqs", "ntk-mixed", ["mixed_b=11"], "2", None, ["ntk-mixed parameter mixed_b", "must be <= 10"]),
    ("freqs", "ntk-alpha", ["scaling_alpha=1e10"], "2", None, ["ntk-alpha parameter scaling_alpha", "must be <= 16777216"]),
    ("freqs", "ntk-alpha", ["scaling_alpha=1e300"], "2", None, ["ntk-alpha parameter scaling_alpha", "must be <= 16777216"]),
    ("freqs", "ssmax", ["attn_scale=1e308"], "2", None, ["ssmax parameter attn_scale", "must be <= 1"]),
    ("freqs", "yarn+ssmax", ["attn_scale=2"], "2", None, ["ssmax parameter attn_scale", "must be <= 1"]),
    ("freqs", "ssmax", ["floor_scale=32m"], "2", None, ["ssmax parameter floor_scale", "'32m' must be <= 16m"]),
    ("freqs", "ssmax", ["floor_scale=1e20"], "2", None, ["ssmax parameter floor_scale", "must be <= 16m"]),
    ("freqs", "rerope", ["window=1e20"], "2", None, ["rerope parameter window", "must be <= 16m"]),
    ("freqs", "rerope", ["window=17m"], "2", None, ["rerope parameter window", "'17m' must be <= 16m"]),
    ("freqs", "leaky-rerope", ["k=1e300"], "2", None, ["leaky-rerope parameter k", "must be <= 16777216"]),
    ("freqs", "self-extend", ["group=1e9"], "2", None, ["self-extend parameter group", "must be <= 16777216"]),
    ("freqs", "leaky-rerope", ["window=20m"], "2", None, ["leaky-rerope parameter window", "must be <= 16m"]),
    ("freqs", "self-extend", ["window=1e10"], "2", None, ["self-extend parameter window", "must be <= 16m"]),
    ("freqs", "string", ["window=1e12"], "2", None, ["string parameter window", "must be <= 16m"]),
    ("freqs", "string", ["local_value=20m"], "2", None, ["string parameter local_value", "must be <= 16m"]),
    ("freqs", "dca", ["chunk_size=1e15"], "2", None, ["dca parameter chunk_size", "must be <= 16m"]),
    ("freqs", "dca", ["local_window=1e9"], "2", None, ["dca parameter local_window", "must be <= 16m"]),
    ("freqs", "ms-poe", ["ratio_min=1e300"], "2", None, ["ms-poe parameter ratio_min", "must be <= 16777216"]),
    ("freqs", "ms-poe", ["ratio_max=1e308"], "2", None, ["ms-poe parameter ratio_max", "must be <= 16777216"]),
    ("freqs", "ms-poe", ["first_layer=5000"], "2", None, ["ms-poe parameter first_layer", "must be <= 1023"]),
    # the factor: finite, at most 2^24, and s*L no longer than the longest length ctxbench takes
    ("freqs", "ntk", [], "1e300", None, ["bad factor '1e300'", "must be <= 16,777,216"]),
    ("freqs", "linear", [], "1e300", None, ["bad factor '1e300'", "must be <= 16,777,216"]),
    ("freqs", "ntk", [], "inf", None, ["bad factor 'inf'", "not a finite number"]),
    ("freqs", "yarn", [], "16777217", None, ["bad factor '16777217'", "must be <= 16,777,216"]),
    ("freqs", "yarn", [], "8192", None, ["factor 8192 stretches the trained length L = 4,096", "past the longest length"]),
    ("freqs", "dynamic-ntk", [], "1e6", None, ["factor 1e+06 stretches", "for method 'dynamic-ntk'", "works up to about 4096"]),
    ("freqs", "none,linear", [], "65536", None, ["factor 65536 stretches", "for method 'linear'"]),
    ("export", "yarn", [], "1e200", "vllm", ["bad factor '1e200'", "must be <= 16,777,216"]),
    ("export", "ntk", [], "1e300", "llamacpp", ["bad factor '1e300'"]),
    ("export", "ntk", [], "8192", "transformers", ["factor 8192 stretches", "for method 'ntk'"]),
    ("export", "llama3", [], "1e5", "vllm", ["factor 100000 stretches", "for method 'llama3'"]),
    ("export", "yarn", [], "nan", "transformers", ["bad factor 'nan'", "not a finite number"]),
    # the derived numbers: computed on the model's geometry, the value to blame and the range that works
    ("freqs", "yarn", ["beta_slow=1e-320"], "2", None, ["beta_slow=", "cannot be computed: OverflowError", "beta_slow works from about"]),
    ("freqs", "dynamic-yarn", ["beta_slow=1e-320"], "2", None, ["for method 'dynamic-yarn'", "cannot be computed"]),
    ("freqs", "proportional", ["partial_rotary_factor=0.01"], "2", None,
     ["partial_rotary_factor=0.01 leaves nothing to rotate", "works from about 0.03125 up"]),  # fmt: skip
    ("freqs", "proportional+logn", ["partial_rotary_factor=0.03"], "2", None, ["leaves nothing to rotate"]),
    ("freqs", "yarn", ["attention_factor=1e-30"], "2", None, ["attention scale 1e-30", "not a finite float32 > 0"]),
    ("freqs", "longrope", ["factors=flat.json", "attention_factor=1e-25"], "2", None, ["attention_factor=1e-25", "attention scale"]),
    ("export", "yarn", ["attention_factor=1e-30"], "2", "vllm", ["attention scale 1e-30"]),
    ("export", "proportional", ["partial_rotary_factor=0.02"], "2", "transformers", ["leaves nothing to rotate"]),
    # export: the declared ranges refuse before anything is printed (it printed 201-digit lengths and Infinity)
    ("export", "theta", ["theta=1e300"], "2", "json", ["theta parameter theta", "must be <= 1e+12"]),
    ("export", "ntk-alpha", ["scaling_alpha=1e300"], "2", "transformers", ["scaling_alpha", "must be <= 16777216"]),
    ("export", "yarn", ["attention_factor=1e308"], "2", "vllm", ["yarn parameter attention_factor", "must be <= 10"]),
    ("export", "rerope", ["window=1e20"], "2", "json", ["rerope parameter window", "must be <= 16m"]),
    ("export", "dca", ["chunk_size=1e20"], "2", "json", ["dca parameter chunk_size", "must be <= 16m"]),
    ("export", "yarn", ["beta_fast=1e308"], "2", "llamacpp", ["yarn parameter beta_fast", "must be <= 1e+06"]),
    ("export", "ntk-mixed", ["mixed_b=1e3"], "2", "vllm", ["ntk-mixed parameter mixed_b", "must be <= 10"]),
]


@pytest.mark.parametrize("command,method,params,factor,engine,words", CASES,
                         ids=[f"{c}-{m}:{'&'.join(p) or 'factor=' + f}" + (f"-{e}" if e else "") for c, m, p, f, e, _ in CASES])  # fmt: skip
def test_a_value_past_its_meaning_is_one_line_and_its_fix_works(workdir, monkeypatch, capsys, command, method, params, factor,
                                                               engine, words):  # fmt: skip
    code, out, err = cli_main(_argv(command, method, params, factor, engine), monkeypatch, capsys)
    line = one_error_line(code, err, words)
    assert out == ""  # nothing printed before the refusal: no half export, no Infinity
    fixed_params, fixed_factor = _apply_fix(line, params, factor)
    code, out, err = cli_main(_argv(command, method, fixed_params, fixed_factor, engine), monkeypatch, capsys)
    assert code == 0, (line, err)
    assert "Infinity" not in out and "NaN" not in out
    if engine in ("json", "transformers"):
        json.loads(out)  # strict JSON


def test_cases_cover_every_numeric_parameter_at_its_high_end():
    covered = {(part, p.split("=")[0]) for _, m, params, *_ in CASES for p in params for part in m.split("+")}
    numeric = {(n, p.name) for n, m in METHODS.items() for p in m.declared if p.kind in ("float", "int", "length")}
    assert numeric - covered == set()


def test_a_base_past_float32_blames_the_model_and_a_real_base_works(workdir, monkeypatch, capsys):
    argv = ["freqs", "--method", "ntk", "--factor", "2", "--head-dim", "64", "--trained-len", "4k", "--base"]
    code, _, err = cli_main([*argv, "1e300"], monkeypatch, capsys)
    one_error_line(code, err, ["rope base b = 1e+300", "whatever its parameters", "rope_theta"])
    assert cli_main([*argv, "1e4"], monkeypatch, capsys)[0] == 0


# ---- the mechanism: finite ranges, and every value in them gives finite numbers or one error --------


def test_every_numeric_parameter_declares_a_finite_range():
    for name, m in METHODS.items():
        for p in m.declared:
            if p.kind in ("float", "int", "length"):
                assert p.low is not None and p.high is not None and math.isfinite(p.high), (name, p.name)
                assert p.check(p.high, name) is not None  # its own end is accepted


def _values(p):
    """A parameter's ends and a point past each, as given by a user."""
    return [p.low, p.high, p.high * 2, p.low / 2 if p.low else 1e-300, 1e-320 if p.kind == "float" else 0]


@pytest.mark.parametrize("name", [n for n, m in METHODS.items() if any(p.kind in ("float", "int", "length") for p in m.declared)])
@pytest.mark.parametrize("factor", [1.0, 2.0, 4096.0, float(MOST_FACTOR)])
def test_every_value_at_the_ends_of_a_range_gives_finite_numbers_or_one_error(name, factor):
    """Every numeric parameter of every method at each end of its range and past it, at factors up
    to the largest: resolve and the derived check either accept it, and then every inverse
    frequency and scale is finite, or raise one UserError; never OverflowError, never inf."""
    from ctxbench.methods import frequencies, numpy_namespace

    geom = RopeGeometry(head_dim=64, rotary_dim=64, base=1e4, trained_len=4096)
    required = {p.name: p.example for p in METHODS[name].declared if p.required}
    for p in METHODS[name].declared:
        if p.kind not in ("float", "int", "length"):
            continue
        for value in _values(p):
            try:
                setting = resolve(name, {**required, p.name: value}, runnable=True)
                check_derived(setting, geom, factor, [4096])
            except UserError as exc:
                assert "\n" not in exc.line() and " — " in exc.line()
                continue
            if geom.has_rope and setting.freq.fn is not None and not setting.freq.name == "longrope":
                inv_freq, scale = frequencies(setting, geom, factor, 4096, xp=numpy_namespace())
                assert all(math.isfinite(x) for x in inv_freq.tolist()) and math.isfinite(scale), (name, p.name, value, factor)


def test_the_blamed_range_is_where_it_works():
    """The edge the error names is where the check flips: just inside works, just past does not."""
    geom = RopeGeometry(head_dim=64, rotary_dim=64, base=1e4, trained_len=4096)
    with pytest.raises(UserError) as info:
        check_derived(resolve("proportional", {"partial_rotary_factor": 0.01}), geom, 2.0)
    edge = float(re.search(r"works from about (\S+) up", info.value.fix).group(1))
    check_derived(resolve("proportional", {"partial_rotary_factor": edge * 1.001}), geom, 2.0)
    with pytest.raises(UserError):
        check_derived(resolve("proportional", {"partial_rotary_factor": edge * 0.999}), geom, 2.0)


def test_export_writes_strict_json_or_refuses():
    """The last guard: a number that is not finite is never written as ``Infinity``/``NaN`` (not JSON)."""
    from ctxbench.methods.export import _json

    assert _json({"factor": 2.0}) == '{"factor": 2.0}'
    with pytest.raises(UserError, match="not finite"):
        _json({"factor": float("inf")})
