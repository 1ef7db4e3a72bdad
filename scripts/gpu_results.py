"""Turn what ``scripts/gpu_check.sh`` wrote under ``$OUT`` into committed results under ``results/gpu/``,
the files the docs' GPU status is generated from (``scripts/docgen.py``, ``gpu_status``):

    python scripts/gpu_results.py DIR      # DIR holds bench_gpu.json, bench_gpu.md, cuda_tests.xml

* ``results/gpu/bench-<device>-<date>.json``: the bench's rows, kernel choices and provenance, as written;
* ``results/gpu/bench-<device>-<date>.md``: the bench's tables, as printed;
* ``results/gpu/cuda-tests-<device>-<date>.csv``: one row per CUDA test (outcome, seconds, the first line
  of a failure), each with the run's provenance (device, torch, transformers, commit, date).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["test", "outcome", "seconds", "message", "device", "torch", "transformers", "commit", "date"]


def slug(device: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'."""
    found = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", device)
    return (found.group(1) if found else re.sub(r"\W+", "-", device)).lower()


def test_rows(xml_path: Path, provenance: dict) -> list[dict]:
    rows = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or "").splitlines()[0][:200] if node.get("message") else ""
                break
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        rows.append({"test": name, "outcome": outcome, "seconds": case.get("time", ""), "message": message,
                     **{k: provenance[k] for k in COLUMNS[4:]}})  # fmt: skip
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python scripts/gpu_results.py DIR (the $OUT of scripts/gpu_check.sh)", file=sys.stderr)
        return 2
    src = Path(argv[0])
    bench = json.loads((src / "bench_gpu.json").read_text())
    prov = bench["provenance"]
    provenance = {"device": prov["device"], "torch": prov["torch"], "transformers": prov["transformers"],
                  "commit": prov["commit"], "date": prov["date"]}  # fmt: skip
    stem = f"{slug(prov['device'])}-{prov['date'][:10].replace('-', '')}"
    out = ROOT / "results" / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "bench_gpu.json", out / f"bench-{stem}.json")
    if (src / "bench_gpu.md").is_file():
        shutil.copyfile(src / "bench_gpu.md", out / f"bench-{stem}.md")
    if (src / "cuda_tests.xml").is_file():
        with open(out / f"cuda-tests-{stem}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            w.writerows(test_rows(src / "cuda_tests.xml", provenance))
    print(f"wrote results/gpu/*-{stem}.*")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
