"""Turn what ``scripts/gpu_check.sh`` wrote under ``$OUT`` into committed results under ``results/gpu/``,
the files the docs' GPU status is generated from (``scripts/docgen.py``, ``gpu_status``):

    python scripts/gpu_results.py DIR [COMMIT]   # DIR holds cuda_tests.xml, gpu_check.log and, where the
                                                 # bench ran, bench_gpu.json and bench_gpu.md

Without the bench (``BENCH_SECONDS=0``) the provenance comes from ``gpu_check.log`` (device, torch,
transformers, date) and COMMIT names the commit whose tree ran (the device's copy has no git).

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


def log_provenance(log: Path, commit: str) -> dict:
    """Device, torch, transformers and date from ``gpu_check.log``'s header lines."""
    text = log.read_text()
    date = re.search(r"^== gpu_check (\S+)", text, re.M)
    found = re.search(r"^torch (\S+), transformers (\S+), cuda True (.+)$", text, re.M)
    if not (date and found):
        raise SystemExit(f"{log}: no 'torch ..., transformers ..., cuda True DEVICE' line; was it written by gpu_check.sh?")
    return {"device": found.group(3).strip(), "torch": found.group(1), "transformers": found.group(2), "commit": commit,
            "date": date.group(1)}  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or not Path(argv[0]).is_dir():
        print("usage: python scripts/gpu_results.py DIR [COMMIT] (DIR: the $OUT of scripts/gpu_check.sh)", file=sys.stderr)
        return 2
    src = Path(argv[0])
    bench = json.loads((src / "bench_gpu.json").read_text()) if (src / "bench_gpu.json").is_file() else None
    if bench is not None:
        prov = bench["provenance"]
        provenance = {"device": prov["device"], "torch": prov["torch"], "transformers": prov["transformers"],
                      "commit": prov["commit"], "date": prov["date"]}  # fmt: skip
    elif len(argv) == 2:
        provenance = log_provenance(src / "gpu_check.log", argv[1])
    else:
        print("without bench_gpu.json, name the commit whose tree ran: python scripts/gpu_results.py DIR COMMIT", file=sys.stderr)
        return 2
    stem = f"{slug(provenance['device'])}-{provenance['date'][:10].replace('-', '')}"
    out = ROOT / "results" / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    if bench is not None:
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
