"""Draw a search's ``trials.png`` again from its ``trials.csv`` (the newest search in the file, or
``--run-id``), with the plot code of this checkout: the figure of a committed search after the plot
changed, without computing anything.

    python scripts/replot_tune.py results/tune/yarn-16k
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from ctxbench.tune.plot import plot_trials
from ctxbench.tune.search import Trial
from ctxbench.tune.space import Candidate, space_for
from ctxbench.tune.store import IDENTITY, TrialsFile


def trials_of(path: Path, rows: list[dict]) -> list[Trial]:
    """The search's trials (``rows``, one run's) in order, each with its values on the tuning
    documents, read back as a resumed search reads them."""
    cached = TrialsFile(path, {k: rows[0][k] for k in IDENTITY}).cached("tune")
    trials = []
    for r in rows:
        if r["kind"] == "trial":
            candidate = Candidate(float(r["factor"]), tuple(sorted(json.loads(r["method_params"] or "{}").items())))
            values = [v for (key, _), v in cached.items() if key == r["candidate"]]
            trials.append(Trial(int(r["trial"]), candidate, r["label"], values, r["status"], r["reason"]))
    return sorted(trials, key=lambda t: t.number)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a ctxbench tune --out directory")
    parser.add_argument("--run-id", help="the search to draw (default: the newest in trials.csv)")
    args = parser.parse_args()
    root = Path(args.dir)
    with (root / "trials.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    run_id = args.run_id or max(rows, key=lambda r: r["time"])["run_id"]
    rows = [r for r in rows if r["run_id"] == run_id]
    first = rows[0]
    space = space_for(first["method"], int(first["trained_len"]), int(first["target"]))
    print(plot_trials(trials_of(root / "trials.csv", rows), space, root / "trials.png"))


if __name__ == "__main__":
    main()
