"""ctxbench.freqplot: per-pair frequency rows and the inspector figure."""

from __future__ import annotations

import math

import pytest

from ctxbench.errors import UserError
from ctxbench.freqplot import COLUMNS, freq_rows, plot_freqs
from ctxbench.geometry import RopeGeometry

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
