"""lm-evaluation-harness's side of ``scripts/bench_peers.py``: run in lm-eval's own virtual environment
(never the project's), one process per timed job, as a user of lm-eval's Python API would run it.

    /tmp/lmeval/bin/python scripts/peer_lmeval.py JOB.json OUT.json

``JOB.json`` (written by ``bench_peers.py``) says the job:

* ``{"kind": "ppl", "dtype": ..., "methods": {label: checkpoint}, "lengths": {L: docs.jsonl}}``: per
  method one ``simple_evaluate`` of lm-eval's HF model (``pretrained`` the method's copy of the
  checkpoint, its ``config.json`` carrying the method as ``ctxbench export --to hf`` writes it,
  ``max_length`` the longest length), with one ``loglikelihood_rolling`` task per length (the
  configuration of lm-eval's own ``wikitext``: target ``{{text}}``, no context), over that length's
  documents. Writes each document's summed log-likelihood per method and length.
* ``{"kind": "niah", "dtype": ..., "checkpoint": ..., "length": L, "samples": N}``: lm-eval's RULER
  ``niah_single_1`` at ``L`` (its samples built offline from the tokenizer: the ``repeat``
  haystack downloads nothing), the first ``N`` samples (``limit``). Writes the score.
* ``{"kind": "pass", "dtype": ..., "checkpoint": ..., "length": L, "docs": docs.jsonl, "repeats": R}``:
  the model loaded once, the first document scored ``R`` times; writes each scoring's seconds.
"""

from __future__ import annotations

import json
import sys


def ppl(job: dict) -> dict:
    from lm_eval.evaluator import simple_evaluate

    out: dict = {}
    longest = max(int(n) for n in job["lengths"])
    for label, checkpoint in job["methods"].items():
        tasks = [{
            "task": f"ctxbench_ppl_{n}", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": path}},
            "test_split": "test", "output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
            "metric_list": [{"metric": "word_perplexity"}], "metadata": {"version": 1.0},
        } for n, path in job["lengths"].items()]  # fmt: skip
        model_args = {"pretrained": checkpoint, "dtype": job["dtype"], "max_length": longest}
        res = simple_evaluate(model="hf", model_args=model_args, tasks=tasks, batch_size=1, device="cpu", log_samples=True)
        for n in job["lengths"]:
            samples = sorted(res["samples"][f"ctxbench_ppl_{n}"], key=lambda s: s["doc_id"])
            out.setdefault(label, {})[n] = [_loglik(s["resps"]) for s in samples]
    return out


def _loglik(resps) -> float:
    """The summed log-likelihood of one rolling request, however deep lm-eval nests it."""
    value = resps
    while isinstance(value, list | tuple):
        value = value[0]
    return float(value)


def niah(job: dict) -> dict:
    from lm_eval.evaluator import simple_evaluate

    # the metadata reaches the task (its lengths, the tokenizer it sizes samples with) only through
    # the task manager simple_evaluate builds itself
    model_args = {"pretrained": job["checkpoint"], "dtype": job["dtype"], "max_length": job["length"]}
    res = simple_evaluate(model="hf", model_args=model_args, tasks=["niah_single_1"], batch_size=1, device="cpu",
                          limit=job["samples"], metadata={"max_seq_lengths": [job["length"]], "tokenizer": job["checkpoint"]})  # fmt: skip
    return {"score": res["results"]["niah_single_1"].get(f"{job['length']},none")}


def per_pass(job: dict) -> dict:
    """Seconds of each of ``repeats`` scorings of one document through lm-eval's HF model, loaded once:
    ``loglikelihood_rolling`` as its tasks call it (the forward, the full-vocabulary log-softmax, the
    gather), nothing else."""
    import time

    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=job["checkpoint"], dtype=job["dtype"], max_length=job["length"], batch_size=1, device="cpu")
    text = json.loads(open(job["docs"]).readline())["text"]
    seconds = []
    for _ in range(job["repeats"]):
        request = Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
        t0 = time.perf_counter()
        loglik = lm.loglikelihood_rolling([request], disable_tqdm=True)[0]
        seconds.append(time.perf_counter() - t0)
    return {"seconds": seconds, "loglik": float(loglik)}


def main(job_path: str, out_path: str) -> None:
    job = json.loads(open(job_path).read())
    out = {"ppl": ppl, "niah": niah, "pass": per_pass}[job["kind"]](job)
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
