"""Runs lm-evaluation-harness's own ``longbench2`` task on ``tests/data/longbench2-lmeval/items.jsonl``
and writes its per-item log-likelihoods, the expected values of
``tests/tasks/test_longbench2_lmeval.py``. Run once, outside CI, in a virtual environment of its own
(never the project's):

    python3 -m venv /tmp/lmeval && /tmp/lmeval/bin/pip install 'lm_eval[hf]==0.4.13'
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 /tmp/lmeval/bin/python scripts/lmeval_longbench2.py CHECKPOINT MODEL_DIGEST

``CHECKPOINT`` is the default model dequantised to a transformers folder (``load('smollm2-135m',
device='cpu', dtype='float32').checkpoint``), ``MODEL_DIGEST`` its ``digest``. The task's
configuration is lm-eval's installed ``longbench2_detective`` (``_longbench_common_yaml``: its
``doc_to_text``, ``doc_to_choice``, ``doc_to_target``, ``acc``) with the dataset alone replaced by the
local file (``dataset_path: json``); nothing comes from the hub.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "tests" / "data" / "longbench2-lmeval"
ITEMS = HERE / "items.jsonl"
OUT = HERE / "expected.json"
MAX_LENGTH = 512  # HFLM's max_length: the fixture's longer items are cut from the left
LETTERS = ("A", "B", "C", "D")


def main(checkpoint: str, digest: str) -> None:
    import lm_eval
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks._yaml_loader import load_yaml

    upstream = Path(lm_eval.__file__).parent / "tasks" / "longbench2" / "detective.yaml"
    config = load_yaml(upstream)  # its include, _longbench_common_yaml, merged in
    for key in ("tag", "group", "dataset_name"):
        config.pop(key, None)
    config.update(task="longbench2_fixture", dataset_path="json", dataset_kwargs={"data_files": {"train": str(ITEMS)}})
    model_args = {"pretrained": checkpoint, "dtype": "float32", "max_length": MAX_LENGTH}
    out = simple_evaluate(model="hf", model_args=model_args, tasks=[config], batch_size=1, device="cpu", log_samples=True)
    samples = sorted(out["samples"]["longbench2_fixture"], key=lambda s: s["doc_id"])
    items = []
    for s in samples:
        loglik = [float(r[0][0]) for r in s["resps"]]
        items.append({"_id": s["doc"]["_id"], "loglik": dict(zip(LETTERS, loglik, strict=True)),
                      "pick": LETTERS[max(range(4), key=loglik.__getitem__)], "answer": s["doc"]["answer"], "acc": s["acc"]})  # fmt: skip
    OUT.write_text(json.dumps({
        "lm_eval": _version("lm_eval"), "torch": _version("torch"), "transformers": _version("transformers"),
        "task": "longbench2 (lm_eval/tasks/longbench2/_longbench_common_yaml via detective.yaml), dataset replaced by items.jsonl",
        "model": "smollm2-135m", "model_digest": digest, "dtype": "float32", "max_length": MAX_LENGTH,
        "command": "HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 /tmp/lmeval/bin/python scripts/lmeval_longbench2.py " + " ".join(sys.argv[1:]),
        "simple_evaluate": {"model": "hf", "model_args": {**model_args, "pretrained": "CHECKPOINT"}, "batch_size": 1, "device": "cpu",
                            "log_samples": True},
        "acc": out["results"]["longbench2_fixture"]["acc,none"],
        "items": items,
    }, indent=1) + "\n")  # fmt: skip


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main(*sys.argv[1:3])
