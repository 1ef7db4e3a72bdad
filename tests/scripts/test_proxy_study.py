"""scripts/proxy_study.py: the configurations it reads from committed niah files, and the sign of
its correlations (a proxy that ranks configurations exactly as the target does gets rho = +1)."""

from __future__ import annotations

import importlib.util
import sys

import pandas as pd
import pytest
from helpers import ROOT

ROOT = ROOT
SCRIPT = ROOT / "scripts" / "proxy_study.py"


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("proxy_study", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_niah_at_16k_uses_the_first_ten_trials_of_every_configuration(study):
    # yarn holds 30 trials at 16k (24 right); its first 10, the needles every method saw, hold 7
    table = study.niah_table([str(ROOT / "results" / "niah-smollm2-x2-ruler.csv")], 16384, 10).set_index("config")
    assert table.loc["yarn x2", "trials"] == 10 and table.loc["yarn x2", "niah_16k"] == pytest.approx(0.7)
    assert table.loc["rerope", "niah_16k"] == 1.0 and table.loc["none", "niah_16k"] == 0.0


def test_effective_length_follows_ctxbench_rule_on_those_trials(study):
    table = study.niah_table([str(ROOT / "results" / "niah-smollm2-x2-ruler.csv")], 16384, 10).set_index("config")
    assert table.loc["rerope", "effective_length"] == 16384  # 100% at every length
    assert table.loc["yarn x2", "effective_length"] == 8192  # 70% at 16k < 85% of its 100% at 2k


def test_a_factor_free_method_is_one_configuration_whatever_its_factor(study):
    assert study.config_of("string", "string", 2.0) == study.config_of("string", "string", 4.0) == "string"
    assert study.config_of("yarn", "yarn", 4.0) == "yarn x4"


def test_a_proxy_ranking_as_the_target_does_has_rho_plus_one(study):
    # lower is better for every proxy: perplexity falling as accuracy rises is full agreement
    table = pd.DataFrame({"config": list("abcde"), "niah_16k": [0.0, 0.2, 0.5, 0.8, 1.0],
                          "effective_length": [2048, 4096, 8192, 8192, 16384],
                          "ppl": [30.0, 12.0, 8.0, 6.0, 5.0], "longppl": [1.0, 2.0, 3.0, 4.0, 5.0], "kl": [0.5] * 5,
                          "answer_nll": [5.0, 3.0, 1.0, 0.5, 0.1],
                          "ppl_min": [1.0] * 5, "longppl_min": [1.0] * 5, "kl_min": [1.0] * 5, "answer_nll_min": [1.0] * 5})  # fmt: skip
    corr = study.correlations(table).set_index(["proxy", "target"])
    assert corr.loc[("ppl", "niah_16k"), "rho"] == pytest.approx(1.0)
    assert corr.loc[("longppl", "niah_16k"), "rho"] == pytest.approx(-1.0)
    assert pd.isna(corr.loc[("kl", "niah_16k"), "rho"])  # a constant proxy ranks nothing
    assert corr.loc[("answer_nll", "niah_16k"), "rho"] == pytest.approx(1.0)


def test_the_answer_nll_is_read_from_cells_holding_exactly_the_study_trials(study):
    gpu = [str(ROOT / "results" / "niah-smollm2-gpu.csv")]
    table = study.answer_table(gpu, 16384, 10).set_index("config")
    assert len(table) == 13 and table.loc["yarn x2", "answer_nll"] == pytest.approx(0.674515, abs=1e-6)
    assert table.loc["none", "answer_nll_lo"] < table.loc["none", "answer_nll"] < table.loc["none", "answer_nll_hi"]
    assert study.answer_table(gpu, 16384, 30).empty  # those cells hold 10 trials, not the 30 asked for


STUDY = ROOT / "results" / "proxy-study-smollm2"
NIAH = ["niah-smollm2-x2-ruler.csv", "niah-smollm2-string-16k.csv", "niah-smollm2-validation.csv"]


def _committed_study(study):
    results = ROOT / "results"
    return study.study_table([str(results / f) for f in NIAH], [str(results / "proxies-smollm2-16k.csv")],
                             [str(results / "niah-smollm2-gpu.csv")], 16384, 10)  # fmt: skip


def test_the_committed_correlations_follow_from_the_committed_runs(study):
    committed = pd.read_csv(f"{STUDY}-correlations.csv")
    again = study.correlations(_committed_study(study))
    assert again["configs"].tolist() == committed["configs"].tolist()
    assert again["rho"].to_numpy() == pytest.approx(committed["rho"].to_numpy(), abs=1e-5, nan_ok=True)
