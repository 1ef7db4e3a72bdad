"""ctxbench.methods.freqplot: per-pair frequency rows and the inspector figure."""

from __future__ import annotations

import csv
import io
import math
import os
import subprocess

import pytest

from ctxbench.errors import UserError
from ctxbench.methods.freqplot import COLUMNS, freq_rows, plot_freqs
from ctxbench.model.geometry import RopeGeometry

GEOM = RopeGeometry(head_dim=64, rotary_dim=64, base=10000, trained_len=2048)
METHODS = ["none", "linear", "ntk", "yarn", "llama3"]
S = 4.0


@pytest.fixture(scope="module")
def rows():
    return freq_rows(METHODS, GEOM, S, None, {})


def scales(rows, method):
    return [r["scale"] for r in sorted((r for r in rows if r["method"] == method), key=lambda r: r["pair"])]


def test_rows_shape(rows):
    assert len(rows) == len(METHODS) * GEOM.pairs
    assert all(set(r) == set(COLUMNS) for r in rows)
    first = [r for r in rows if r["method"] == "none"]
    assert [r["pair"] for r in first] == list(range(32))
    assert first[0]["wavelength"] == pytest.approx(2 * math.pi)
    assert first[-1]["wavelength"] == pytest.approx(2 * math.pi * 10000 ** (62 / 64), rel=1e-6)
    # the wavelength column is the original one: the same for every method
    assert {r["wavelength"] for r in rows if r["method"] == "linear"} == {r["wavelength"] for r in first}


def test_none_and_linear(rows):
    assert scales(rows, "none") == [1.0] * 32
    assert scales(rows, "linear") == pytest.approx([S] * 32, rel=1e-6)
    lin = [r for r in rows if r["method"] == "linear"]
    assert all(r["scaled_wavelength"] == pytest.approx(S * r["wavelength"], rel=1e-6) for r in lin)


def test_ntk_rises_from_1_to_s(rows):
    sc = scales(rows, "ntk")
    assert sc[0] == pytest.approx(1.0) and sc[-1] == pytest.approx(S, rel=1e-5)
    assert all(b > a for a, b in zip(sc, sc[1:], strict=False))


def test_yarn_keeps_high_and_interpolates_low(rows):
    sc = scales(rows, "yarn")
    assert sc[0] == pytest.approx(1.0) and sc[-1] == pytest.approx(S, rel=1e-6)
    yarn = [r for r in rows if r["method"] == "yarn"]
    assert yarn[0]["attention_scale"] == pytest.approx(0.1 * math.log(S) + 1)
    assert all(r["attention_scale"] == 1.0 for r in rows if r["method"] != "yarn")


def test_llama3_by_wavelength(rows):
    for r in rows:
        if r["method"] != "llama3":
            continue
        if r["wavelength"] < GEOM.trained_len / 4:
            assert r["scale"] == pytest.approx(1.0)
        elif r["wavelength"] > GEOM.trained_len:
            assert r["scale"] == pytest.approx(S, rel=1e-6)
        else:
            assert 1.0 <= r["scale"] <= S


def test_params_routing():
    base = scales(freq_rows(["yarn"], GEOM, S), "yarn")
    own = freq_rows(["linear", "yarn"], GEOM, S, params={"yarn": {"beta_fast": 4}})
    flat = freq_rows(["linear", "yarn"], GEOM, S, params={"beta_fast": 4})
    assert scales(own, "yarn") == scales(flat, "yarn") != base
    assert scales(flat, "linear") == pytest.approx([S] * 32, rel=1e-6)
    with pytest.raises(UserError, match="beta_fsat"):
        freq_rows(["linear", "yarn"], GEOM, S, params={"beta_fsat": 4})


def test_dynamic_defaults_to_factor_times_L():
    at_target = scales(freq_rows(["dynamic-ntk"], GEOM, S), "dynamic-ntk")
    # base b*(s*l/L - (s-1))^(d/(d-2)) at l = s*L: NTK with factor s^2 - s + 1
    assert at_target == pytest.approx(scales(freq_rows(["ntk"], GEOM, S * S - S + 1), "ntk"), rel=1e-6)
    assert scales(freq_rows(["dynamic-ntk"], GEOM, S, seq_len=1024), "dynamic-ntk") == [1.0] * 32


@pytest.mark.parametrize("x", ["wavelength", "pair"])
def test_plot_written(rows, tmp_path, x):
    path = plot_freqs(rows, GEOM, S, tmp_path / "sub" / f"freqs-{x}.png", x=x, title="test")
    assert path.is_file() and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_bad_axis(rows, tmp_path):
    with pytest.raises(UserError):
        plot_freqs(rows, GEOM, S, tmp_path / "x.png", x="frequency")


ALL_FREQUENCY_METHODS = [
    ("none", {}), ("linear", {}), ("ntk", {}), ("dynamic-ntk", {}), ("ntk-by-parts", {}), ("yarn", {}),
    ("dynamic-yarn", {}), ("llama3", {}), ("longrope", {"factors": [1.0 + 0.1 * i for i in range(32)]}),
    ("theta", {"theta": 1e6}), ("proportional", {"partial_rotary_factor": 0.25}),
]  # fmt: skip


@pytest.mark.parametrize("method,params", ALL_FREQUENCY_METHODS, ids=[m for m, _ in ALL_FREQUENCY_METHODS])
@pytest.mark.parametrize("seq_len", [1024, 8192])
def test_numpy_frequencies_equal_the_torch_ones_that_patch_the_model(method, params, seq_len):
    from ctxbench.methods import frequencies, numpy_namespace, resolve

    setting = resolve(method, params)
    ours, our_scale = frequencies(setting, GEOM, S, seq_len, xp=numpy_namespace())
    theirs, their_scale = frequencies(setting, GEOM, S, seq_len)  # torch: what the model is patched with
    assert str(ours.dtype) == "float32" and our_scale == their_scale
    assert ours.tolist() == pytest.approx(theirs.tolist(), rel=2.4e-7, abs=0)  # at most 2 float32 ulp apart


def test_a_parameter_grid_gives_one_labelled_curve_per_setting():
    rows = freq_rows("yarn", GEOM, S, params={"beta_fast": [16, 32]})
    assert list(dict.fromkeys(r["method"] for r in rows)) == ["yarn(beta_fast=16)", "yarn"]
    assert scales(rows, "yarn(beta_fast=16)") != scales(rows, "yarn")


def _freqs(*argv):
    return subprocess.run(["ctxbench", "freqs", *argv], capture_output=True, text=True, timeout=120)


GEOMETRY_ARGS = ["--head-dim", "64", "--base", "1e4", "--trained-len", "2k", "--factor", "4"]


@pytest.mark.integration
def test_cli_csv_gives_long_rows_with_a_method_column_equal_to_freq_rows():
    proc = _freqs("--method", ",".join(METHODS), *GEOMETRY_ARGS, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    got = list(csv.DictReader(io.StringIO(proc.stdout)))
    want = freq_rows(METHODS, GEOM, S)
    assert [r["method"] for r in got] == [r["method"] for r in want]
    assert [float(r["scale"]) for r in got] == [r["scale"] for r in want]  # full precision


@pytest.mark.integration
def test_cli_table_has_one_scale_column_per_method():
    proc = subprocess.run(["ctxbench", "freqs", "--method", "none,linear,ntk", *GEOMETRY_ARGS], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.strip("│ ").startswith("0 "))
    assert [cell.strip() for cell in row.strip("│").split("│")][2:] == ["1.0000", "4.0000", "1.0000"]


@pytest.mark.integration
def test_cli_plot_writes_a_png_and_keeps_stdout_clean(tmp_path):
    path = tmp_path / "freqs.png"
    proc = _freqs("--method", "none,yarn", *GEOMETRY_ARGS, "--format", "csv", "--plot", str(path))
    assert proc.returncode == 0, proc.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert proc.stdout.splitlines()[0] == ",".join(COLUMNS)


def test_model_geometry_is_read_once_and_cached_by_file(saved_model, tmp_path, monkeypatch):
    from ctxbench.model import files as modelfiles

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    reads = []
    real = modelfiles.load_config
    monkeypatch.setattr(modelfiles, "load_config", lambda *a: reads.append(a) or real(*a))
    first = modelfiles.load_geometry(str(saved_model))
    assert modelfiles.load_geometry(str(saved_model)) == first and len(reads) == 1
    config = saved_model / "config.json"
    config.write_text(config.read_text().replace('"rope_theta": 10000.0', '"rope_theta": 20000.0'))
    assert modelfiles.load_geometry(str(saved_model)).base != first.base and len(reads) == 2  # an edited file is read again
