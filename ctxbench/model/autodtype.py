"""``--dtype auto`` on a CPU: bfloat16 where it is faster on this machine and keeps the numbers.

On a GPU ``auto`` is bfloat16, as before. On a CPU it is bfloat16 only when both hold:

- **parity**: bfloat16's numbers agree with float32's for this model, as measured once and
  committed (:data:`PARITY_FILE`, computed by :func:`parity_of` from the results file that
  ``scripts/dtype_parity.sh`` writes): perplexity within :data:`PPL_LIMIT` of float32's in every
  cell and the retrieval answers equal in at least :data:`ANSWERS_LIMIT` of trials. A model without
  a verdict keeps float32.
- **speed**: a probe at load shows bfloat16 at least :data:`MIN_SPEEDUP` times as fast as float32
  on this CPU. The probe times one forward of the loaded model of :data:`PROBE_TOKENS` tokens in
  float32 and in a bfloat16 copy, taking turns for 3 rounds after a warm-up, the fastest of each:
  the model's own forward, not a matmul, because the matmul ratio overstates the gain (on an
  AVX512-BF16 EPYC a bf16 matmul is 2.3x float32 but the model's 1k forward 1.6x; on the AMX Xeon
  6.4x against about 2x: attention, norms and casts do not speed up alike) and the plan quotes the
  ratio the run will see. About 8 s on a 2-core CPU, once per
  machine and model: the result is cached (``dtype-probes.json``, keyed by :func:`device_key`).

Why bfloat16 needs a gate at all: a CPU without native bf16 arithmetic (before AVX512-BF16 or AMX)
emulates it and runs slower than float32; one with AMX runs it several times faster.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbench.model.cache import BadEntry, JsonCache, Schema, positive_number
from ctxbench.model.files import ALIASES

PARITY_FILE = Path(__file__).with_name("dtype_parity.json")
PPL_LIMIT = 0.005  # bfloat16's perplexity within 0.5% of float32's, in every cell
ANSWERS_LIMIT = 0.98  # and the same retrieval answer in at least 98% of trials
MIN_SPEEDUP = 1.1  # a bfloat16 barely faster than float32 is not worth its rounding
PROBE_TOKENS = 1024
PROBE_ROUNDS = 3


def device_key(device: str, dtype: str) -> str:
    """Names a device for the caches of measurements: the CPU model and core count, or the GPU's model."""
    if device == "cpu":
        model = ""
        try:
            model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                          if line.startswith("model name")), "")  # fmt: skip
        except OSError:
            pass
        return f"cpu|{model or 'unknown'}|{os.cpu_count()}|{dtype}"
    names = sorted(p.read_text().split("Model:", 1)[-1].splitlines()[0].strip()
                   for p in Path("/proc/driver/nvidia/gpus").glob("*/information")) if device == "cuda" else []  # fmt: skip
    return f"{device}|{names[0] if names else 'unknown'}|{dtype}"


# --- parity: measured once, committed --------------------------------------------------------


@dataclass(frozen=True)
class Parity:
    """bfloat16 against float32 for one model: the largest relative perplexity difference over
    ``ppl_cells`` cells, and the share of ``trials`` retrieval trials whose answers are equal (the
    same score and the same answer line: the decoded text up to its first line break, which is what
    the scoring reads). ``texts_equal``, for the record: the share whose whole decoded text is equal
    (decoding runs on past the answer until a stop, and what follows it may differ)."""

    model: str
    ppl_cells: int
    ppl_max_rel_diff: float
    trials: int
    answers_equal: float
    texts_equal: float = 0.0

    @property
    def holds(self) -> bool:
        return self.ppl_cells > 0 and self.trials > 0 and self.ppl_max_rel_diff <= PPL_LIMIT and self.answers_equal >= ANSWERS_LIMIT

    def summary(self) -> str:
        return f"ppl within {self.ppl_max_rel_diff:.2%}, answers {self.answers_equal:.0%} equal"


def parity_of(path: str | os.PathLike, model: str = "smollm2-135m") -> Parity:
    """The parity in a ctxbench results file holding the same grids in float32 and bfloat16: every
    perplexity cell (``ppl`` over all documents) and every retrieval trial (a row with an answer)
    that both dtypes ran."""
    ppl: dict[tuple, dict[str, float]] = defaultdict(dict)
    answers: dict[tuple, dict[str, tuple[str, str, str]]] = defaultdict(dict)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") != "ok" or r.get("dtype") not in ("float32", "bfloat16"):
                continue
            cell = tuple(r.get(c, "") for c in ("task", "label", "factor", "length", "stride", "depth", "variant", "options"))
            if r["metric"] == "ppl" and r["doc"] == "all":  # a perplexity cell, over all its documents
                ppl[cell][r["dtype"]] = float(r["value"])
            elif r.get("answer", "") != "" and r.get("trial", "").isdigit():
                answers[(*cell, r["trial"], r["metric"])][r["dtype"]] = (r["value"], answer_line(r["answer"]), r["answer"])
    diffs = [abs(v["bfloat16"] - v["float32"]) / v["float32"] for v in ppl.values() if len(v) == 2]
    both = [v for v in answers.values() if len(v) == 2]
    share = lambda same: sum(same) / len(same) if same else 0.0  # noqa: E731
    return Parity(model, len(diffs), max(diffs, default=float("inf")), len(both),
                  share([v["bfloat16"][:2] == v["float32"][:2] for v in both]),
                  share([v["bfloat16"][2] == v["float32"][2] for v in both]))  # fmt: skip


def answer_line(text: str) -> str:
    """The answer a retrieval trial gave: its decoded text up to the first line break, stripped."""
    return text.strip().split("\n", 1)[0].strip()


def committed_parity() -> dict[str, Parity]:
    """The committed verdicts by model name (an unreadable file: none, so float32)."""
    try:
        data = json.loads(PARITY_FILE.read_text())
        return {p["model"]: Parity(**{k: p[k] for k in Parity.__dataclass_fields__}) for p in data["verdicts"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def parity_for(spec: str) -> Parity | None:
    """The verdict for model ``spec``: measured on the default model, so it covers its aliases only."""
    verdicts = committed_parity()
    return verdicts.get("smollm2-135m") if spec in ALIASES else verdicts.get(spec)


# --- speed: probed once per machine and model -------------------------------------------------


def _is_probe(value: object) -> None:
    """Seconds of the probe forward in each dtype (finite, > 0), and its length."""
    if not isinstance(value, dict) or set(value) != {"tokens", "float32", "bfloat16"}:
        raise BadEntry(f"{type(value).__name__} {str(value)[:60]}, not {{tokens, float32, bfloat16}}")
    if not isinstance(value["tokens"], int) or isinstance(value["tokens"], bool) or value["tokens"] <= 0:
        raise BadEntry(f"tokens is {value['tokens']!r}, not a count > 0")
    for name in ("float32", "bfloat16"):
        positive_number(value[name], f"{name} seconds")


# Keyed by machine and model. Bump the version when the probe changes: older entries are probed again.
# Version 2: the fastest of 3 rounds taking turns (version 1 timed one forward of each, in turn).
PROBES: JsonCache[dict[str, Any]] = JsonCache("dtype-probes.json", Schema("dtype probes", 2), _is_probe, then="probed again on the next run")


def probe_key(spec: str) -> str:
    return f"{device_key('cpu', 'float32/bfloat16')}|{spec}"


def probe(model, tokens: int = PROBE_TOKENS, rounds: int = PROBE_ROUNDS) -> dict:
    """Seconds of one forward of ``tokens`` tokens of ``model`` (float32, on a CPU) and of a
    bfloat16 copy of it: after a warm-up of each, ``rounds`` rounds that time one of each in turn,
    and the fastest of each. On a machine other work shares, one timing of each moved by 4x between
    calls; taking turns and the minimum compares the two at their least disturbed."""
    import torch  # start-up: torch only where it runs

    vocab = int(getattr(model.config, "vocab_size", 0) or 2)
    ids = torch.randint(0, min(vocab, 1000), (1, tokens))

    def seconds(m) -> float:
        t0 = time.perf_counter()
        m(input_ids=ids, use_cache=False, logits_to_keep=1)
        return time.perf_counter() - t0

    low = copy.deepcopy(model).to(torch.bfloat16)
    try:
        with torch.inference_mode():
            seconds(model), seconds(low)  # warm-up, same shape
            timed = [(seconds(model), seconds(low)) for _ in range(rounds)]
        return {"tokens": tokens, "float32": min(t[0] for t in timed), "bfloat16": min(t[1] for t in timed)}
    finally:
        del low


def cached_probe(spec: str) -> dict | None:
    return PROBES.get(probe_key(spec))


def choose(parity: Parity | None, timing: dict | None) -> tuple[str | None, str]:
    """(dtype, why) for ``--dtype auto`` on a CPU from the parity verdict and the probe's seconds;
    dtype None when only the probe can decide and it has not run."""
    if parity is None:
        return "float32", "auto: bfloat16's parity with float32 is not measured for this model"
    if not parity.holds:
        return "float32", f"auto: bfloat16 failed parity with float32 ({parity.summary()})"
    if timing is None:
        return None, "auto: bfloat16 held parity; its speed on this CPU is probed at load"
    speedup = timing["float32"] / timing["bfloat16"]
    if speedup < MIN_SPEEDUP:
        return "float32", f"auto: bfloat16 {speedup:.2f}x the speed of float32 on this CPU, under {MIN_SPEEDUP}x"
    return "bfloat16", f"auto: {speedup:.1f}x faster than float32 on this CPU, parity held: {parity.summary()}"


def planned(spec: str) -> tuple[str, str]:
    """What ``--dtype auto`` will be on this CPU for ``spec``, before loading: (dtype, why). Not yet
    probed: float32 for the plan, saying the first run probes."""
    dtype, why = choose(parity_for(spec), cached_probe(spec))
    return (dtype, why) if dtype else ("float32", why + " (not yet: float32 until the first run probes it)")


def chosen(spec: str, model) -> tuple[str, str]:
    """What ``--dtype auto`` is on this CPU for ``spec``, given it loaded in float32 as ``model``:
    probes (and caches) its speed when parity holds and it was not probed on this machine."""
    parity = parity_for(spec)
    dtype, why = choose(parity, cached_probe(spec))
    if dtype is None:
        dtype, why = choose(parity, PROBES.lookup(probe_key(spec), lambda: probe(model)))
        assert dtype is not None  # given the probe's seconds, choose always decides
    return dtype, why


if __name__ == "__main__":  # scripts/dtype_parity.sh: the verdict of a parity results file, as committed
    import sys
    from dataclasses import asdict

    found = parity_of(sys.argv[1])
    verdict = {**asdict(found), "holds": found.holds, "results": sys.argv[1]}
    print(json.dumps({"limits": {"ppl_rel_diff": PPL_LIMIT, "answers_equal": ANSWERS_LIMIT}, "verdicts": [verdict]}, indent=1))
