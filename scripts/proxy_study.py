"""Validation study of the cheap proxies: do they rank methods as retrieval at 16k does?

For every configuration (a method label and its factor; a factor-free method once) found in the
niah files, this reads

* RULER niah ``single_1`` accuracy at ``--len`` (default 16k) over trials ``0 .. --trials - 1``
  (the same needles at the same depths for every configuration; a cell holding more trials, as
  ``--trials auto`` leaves, is cut to those), with its Wilson interval;
* its effective length over the niah lengths it has (ctxbench's rule, ``ctxbench.report.effective``,
  on the same trials), when it has them all;
* from the proxy file (``ctxbench ppl --metrics longppl,kl``): perplexity, LongPPL and the KL
  divergence to the unscaled model inside the trained length, with their intervals;
* from the answer-NLL files (``ctxbench niah --metrics answer_nll``, default: the niah files): the
  mean teacher-forced NLL of the needle's value at ``--len`` over the same trials, with the
  cell's interval; a configuration whose cell holds another number of trials is left out;
* the minutes each took on this machine (niah: the trials' own seconds; ppl: the cell's forward;
  longppl and kl: their own rows' seconds, the evaluator's reference shared by the grid included
  once in the first configuration that paid it; answer_nll is scored in the niah trials' own
  prefills, so its minutes are the niah cell's: an upper bound, since alone it would skip decoding).

Then, per proxy and target, Spearman's rho between *minus* the proxy (lower is better for all
four) and the target, so a proxy that ranks configurations as the target does has rho near +1,
with its Bonett-Wright interval (``ctxbench.stats``). Writes the per-configuration table and the
correlations as CSVs, a scatter plot, and prints both as markdown.

    python scripts/proxy_study.py --niah results/niah-smollm2-x2-ruler.csv \\
        results/niah-smollm2-string-16k.csv results/niah-smollm2-validation.csv \\
        --proxies results/proxies-smollm2-16k.csv --answer-nll results/niah-smollm2-gpu.csv \\
        --out results/proxy-study-smollm2 --plot results/plots/proxy-study-smollm2.png
"""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd

from ctxbench.methods import METHODS
from ctxbench.parsing import parse_lengths
from ctxbench.report.effective import effective_length
from ctxbench.results.store import read_records
from ctxbench.stats import spearman, spearman_interval, wilson

PPL_PROXIES = ("ppl", "longppl", "kl")  # metrics of the ppl task
PROXIES = (*PPL_PROXIES, "answer_nll")
TARGETS = ("niah_16k", "effective_length")


def _frame(paths: list[str]) -> pd.DataFrame:
    rows = [r for p in paths for r in read_records(p)]
    d = pd.DataFrame(rows)
    d = d[d["status"] == "ok"].copy()
    for c in ("length", "value", "seconds", "factor"):
        d[c] = pd.to_numeric(d[c], errors="coerce")
    d["trial"] = pd.to_numeric(d["trial"], errors="coerce")
    return d


def config_of(method: str, label: str, factor: float) -> str:
    """One name per configuration: the label, with ``xS`` where the method uses its factor."""
    entry = METHODS.get(method.split("+")[0])
    uses = any(METHODS[m].uses_factor for m in method.split("+") if m in METHODS) if entry else True
    return f"{label} x{factor:g}" if uses and not math.isnan(factor) else label


def niah_table(paths: list[str], length: int, trials: int) -> pd.DataFrame:
    d = _frame(paths)
    d = d[(d["metric"] == "score") & (d["trial"] < trials)]
    d["config"] = [config_of(m, lb, f) for m, lb, f in zip(d["method"], d["label"], d["factor"], strict=True)]
    out = []
    for config, g in d.groupby("config"):
        by_len = g.groupby("length")["value"]
        at = g[g["length"] == length]
        if at.empty:
            continue
        n, right = len(at), int(at["value"].sum())
        lo, hi = wilson(right, n)
        acc = {int(k): float(v) for k, v in by_len.mean().items()}
        lengths = sorted(acc)
        eff = effective_length(acc, True) if len(lengths) >= 4 else None
        out.append(dict(config=config, method=at["method"].iloc[0], niah_16k=right / n, niah_lo=lo, niah_hi=hi, trials=n,
                        niah_lengths=",".join(str(k) for k in lengths), effective_length=eff,
                        niah_min=float(at["seconds"].sum()) / 60))  # fmt: skip
    return pd.DataFrame(out)


def proxy_table(paths: list[str], length: int) -> pd.DataFrame:
    d = _frame(paths)
    d = d[(d["doc"] == "all") & (d["length"] == length)]
    d["config"] = [config_of(m, lb, f) for m, lb, f in zip(d["method"], d["label"], d["factor"], strict=True)]
    out = []
    for config, g in d.groupby("config"):
        row = {"config": config}
        for metric in PPL_PROXIES:
            for suffix in ("", "_lo", "_hi"):
                hit = g[g["metric"] == metric + suffix]
                row[metric + suffix] = float(hit["value"].iloc[0]) if len(hit) else math.nan
        seconds = {m: g.loc[g["metric"] == m, "seconds"].dropna() for m in PPL_PROXIES}
        row["ppl_min"] = float(seconds["ppl"].iloc[0]) / 60 if len(seconds["ppl"]) else math.nan
        # LongPPL scores the ppl forward's own losses on the evaluator's key tokens: its cost for one
        # configuration is that forward plus the evaluator (method-free, paid once per grid)
        hit = g[g["metric"] == "longppl"]
        evaluator = float(json.loads(hit["extra"].iloc[0] or "{}").get("evaluator_seconds", math.nan)) if len(hit) else math.nan
        row["evaluator_min"] = evaluator / 60
        row["longppl_min"] = row["ppl_min"] + row["evaluator_min"]
        row["kl_min"] = float(seconds["kl"].iloc[0]) / 60 if len(seconds["kl"]) else math.nan
        out.append(row)
    return pd.DataFrame(out)


def answer_table(paths: list[str], length: int, trials: int) -> pd.DataFrame:
    """Per configuration: the answer NLL at ``length`` (the cell's ``answer_nll`` row, its
    interval) when the cell holds exactly ``trials`` trials, the same needles niah is read on."""
    d = _frame(paths)
    d = d[(d["length"] == length) & d["metric"].isin(["answer_nll", "answer_nll_lo", "answer_nll_hi"])]
    d["config"] = [config_of(m, lb, f) for m, lb, f in zip(d["method"], d["label"], d["factor"], strict=True)]
    out = []
    for config, g in d.groupby("config"):
        g = g.sort_values("time").drop_duplicates("metric", keep="last")  # a rerun's rows replace the cell's
        row = {m: float(v) for m, v in zip(g["metric"], g["value"], strict=True)}
        n = json.loads(g.loc[g["metric"] == "answer_nll", "extra"].iloc[0] or "{}").get("trials") if "answer_nll" in row else None
        if n == trials:
            out.append({"config": config, **row})
    return pd.DataFrame(out, columns=["config", "answer_nll", "answer_nll_lo", "answer_nll_hi"])


def study_table(niah: list[str], proxies: list[str], answers: list[str], length: int, trials: int) -> pd.DataFrame:
    """One row per configuration with niah at ``length``: its proxies joined to it, and the answer
    NLL's minutes, which are the niah cell's (scored in the trials' own prefills; see the docstring)."""
    table = niah_table(niah, length, trials).merge(proxy_table(proxies, length), on="config", how="left")
    table = table.merge(answer_table(answers, length, trials), on="config", how="left")
    return table.assign(answer_nll_min=table["niah_min"])


def correlations(table: pd.DataFrame) -> pd.DataFrame:
    out = []
    for proxy in PROXIES:
        for target in TARGETS:
            both = table[[proxy, target]].dropna()
            n = len(both)
            rho = spearman(-both[proxy].to_numpy(float), both[target].to_numpy(float)) if n >= 2 else math.nan
            lo, hi = spearman_interval(rho, n)
            out.append(dict(proxy=proxy, target=target, rho=rho, rho_lo=lo, rho_hi=hi, configs=n,
                            minutes_per_config=float(table[f"{proxy}_min"].mean())))  # fmt: skip
    return pd.DataFrame(out)


def plot(table: pd.DataFrame, corr: pd.DataFrame, path: str) -> None:
    from ctxbench.tasks.plots import pyplot

    plt = pyplot()
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    fig, axes = plt.subplots(2, len(PROXIES), figsize=(4.8 * len(PROXIES), 8.5), squeeze=False)
    for j, proxy in enumerate(PROXIES):
        for i, target in enumerate(TARGETS):
            ax = axes[i][j]
            t = table[[proxy, target, "config", "niah_lo", "niah_hi"]].dropna(subset=[proxy, target])
            y = t[target].astype(float) * (100 if target == "niah_16k" else 1)
            if target == "niah_16k":
                err = [y - t["niah_lo"] * 100, t["niah_hi"] * 100 - y]
                ax.errorbar(t[proxy], y, yerr=err, fmt="o", ms=5, capsize=3, alpha=0.8)
                ax.set_ylabel("niah single_1 accuracy at 16k (%)")
                ax.set_ylim(-8, 108)
            else:
                ax.plot(t[proxy], y, "o", ms=5)
                ax.set_yscale("log", base=2)
                ax.set_yticks([2048, 4096, 8192, 16384], ["2k", "4k", "8k", "16k"])
                ax.set_ylim(1800, 20000)
                ax.set_ylabel("effective length (tokens)")
            seen: dict = {}  # labels at the same height are stacked, not printed over each other
            for x, yy, name in zip(t[proxy], y, t["config"], strict=True):
                k = seen[yy] = seen.get(yy, -1) + 1
                ax.annotate(name, (x, yy), fontsize=7, xytext=(4, 3 - 9 * k), textcoords="offset points")
            if proxy == "kl":  # plain RoPE's KL is 0 by construction: a linear axis keeps it
                ax.set_xlim(left=-0.002, right=float(t[proxy].max()) * 1.4 if len(t) else None)  # room for the labels
            else:
                ax.set_xscale("log")
                ticks = (0.05, 0.1, 0.2, 0.5, 1, 2, 5) if proxy == "answer_nll" else (3, 5, 10, 20, 40, 100, 200)
                ax.set_xticks([v for v in ticks if v <= 1.5 * float(t[proxy].max())])
                ax.set_xlim(right=1.8 * float(t[proxy].max()))  # room for the rightmost labels
                ax.xaxis.set_major_formatter(ScalarFormatter())
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel({"ppl": "perplexity at 16k", "longppl": "LongPPL at 16k", "kl": "KL to unscaled, inside 8k (nats)",
                           "answer_nll": "needle's answer NLL at 16k (nats/token)"}[proxy])  # fmt: skip
            c = corr[(corr["proxy"] == proxy) & (corr["target"] == target)].iloc[0]
            ax.set_title(f"{proxy}: rho = {c['rho']:.2f} [{c['rho_lo']:.2f}, {c['rho_hi']:.2f}], n = {c['configs']}", fontsize=10)
            ax.grid(alpha=0.3)
    fig.suptitle("Cheap proxies against retrieval (SmolLM2-135M, RULER niah single_1, ruler protocol); rho of -proxy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--niah", nargs="+", required=True)
    ap.add_argument("--proxies", nargs="+", required=True)
    ap.add_argument("--answer-nll", nargs="+", help="niah files with --metrics answer_nll rows (default: --niah)")
    ap.add_argument("--len", default="16k")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--out", required=True, help="prefix: PREFIX-configs.csv and PREFIX-correlations.csv")
    ap.add_argument("--plot")
    a = ap.parse_args()
    length = parse_lengths(a.len)[0]
    table = study_table(a.niah, a.proxies, a.answer_nll or a.niah, length, a.trials)
    table = table.sort_values("niah_16k", ascending=False, kind="mergesort")
    corr = correlations(table)
    table.to_csv(f"{a.out}-configs.csv", index=False, float_format="%.6g")
    corr.to_csv(f"{a.out}-correlations.csv", index=False, float_format="%.6g")
    if a.plot:
        plot(table, corr, a.plot)
    print(readme_tables(table, corr))


def _len(n) -> str:
    return "—" if n is None or (isinstance(n, float) and math.isnan(n)) else f"{int(n) // 1024}k"


def readme_tables(table: pd.DataFrame, corr: pd.DataFrame) -> str:
    """The two tables as the README shows them (the correlations as ``+0.80 [-0.02, +0.98]``)."""
    lines = ["| configuration | niah single_1 at 16k | effective length | ppl at 16k | LongPPL | KL inside 8k (nats) | answer NLL at 16k |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in table.itertuples(index=False):
        niah = f"{r.niah_16k:.0%} [{r.niah_lo * 100:.0f}-{r.niah_hi:.0%}]"
        lines.append(f"| {r.config} | {niah} | {_len(r.effective_length)} | {r.ppl:.3f} | {r.longppl:.2f} | {r.kl:.4f} | {r.answer_nll:.3f} |")
    lines += ["", "| proxy | against niah at 16k | against effective length | minutes per configuration |",
              "| --- | --- | --- | ---: |"]  # fmt: skip
    for proxy in PROXIES:
        cells = []
        for target in TARGETS:
            c = corr[(corr["proxy"] == proxy) & (corr["target"] == target)].iloc[0]
            cells.append(f"{c['rho']:+.2f} [{c['rho_lo']:+.2f}, {c['rho_hi']:+.2f}] ({c['configs']} configurations)")
        minutes = corr[corr["proxy"] == proxy]["minutes_per_config"].iloc[0]
        lines.append(f"| {proxy} | {cells[0]} | {cells[1]} | {minutes:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
