"""Time the commands that only parse, list or report: each must answer in under a second.

Prints the wall time of each command (median of 3 runs; ``freqs --model`` reads the model's
geometry once per file and caches it, so its first run ever is not counted) and the import time of torch alone,
measured in the same run, for comparison: `python scripts/bench_cli.py`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CTXBENCH = [sys.executable, "-m", "ctxbench"]
COMMANDS = [
    ["--help"], ["ppl", "--help"], ["niah", "--help"], ["methods"],
    ["freqs", "--method", "yarn", "--factor", "4", "--head-dim", "64", "--base", "1e5", "--trained-len", "8k"],
    ["freqs", "--method", "none,linear,ntk,yarn,llama3", "--factor", "4", "--model", "smollm2-135m", "--format", "csv"],
    ["sweep", "tasks/nightly.toml", "--dry-run"],
    ["report", str(ROOT / "results" / "ppl-smollm2-factor2.csv"), "--format", "markdown"],
    ["compare", str(ROOT / "results" / "ppl-smollm2-factor2.csv"), str(ROOT / "results" / "ppl-smollm2-factor2.csv")],
    ["ppl", "--len", "16q"], ["ppl", "--len", "2k,,4k"], ["ppl", "--method", "ntkk"], ["compare", "missing.csv", "missing.csv"],
]  # fmt: skip


def timed(argv: list[str]) -> float:
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, cwd=ROOT)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    torch_import = timed([sys.executable, "-c", "import torch, transformers.modeling_utils"])
    print(f"{'command':70s} seconds")
    worst = 0.0
    for argv in COMMANDS:
        t = timed(CTXBENCH + argv)
        worst = max(worst, t)
        print(f"ctxbench {' '.join(argv)[:61]:61s} {t:7.3f}")
    print(f"{'(import torch + transformers alone, for comparison)':70s} {torch_import:7.3f}")
    print(f"slowest: {worst:.3f} s ({'under' if worst < 1 else 'OVER'} 1 s); torch import / slowest = {torch_import / worst:.1f}x")


if __name__ == "__main__":
    main()
