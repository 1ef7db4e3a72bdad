"""A plan costs O(cells), never O(trials) (issue 37): a trial, document or depth count the user
types is stated once with its count (``CostItem.counts``), absurd values are refused at once with a
ceiling that means something, and ``--dry-run`` under a 2 GB address-space cap answers in seconds
(before, ``--trials 100000000 --dry-run`` was killed at 18-21 GB without printing anything)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest

from ctxbench.runner.grid import Job
from ctxbench.runner.plan import plan_table
from ctxbench.runner.settings import build_settings
from ctxbench.tasks import registry
from ctxbench.tasks.base import CostItem
from ctxbench.tasks.common import shared_prefix_cost, shared_prefix_forwards

CAP = 2 * 2**30  # bytes of address space the CLI may map


def _plan(task: str, **options):
    tasks = registry()
    settings = build_settings(tasks[task], "none,ms-poe", "2", "2k,4k", options)
    return plan_table([Job(tasks[task], settings)], "smollm2-135m")


@pytest.mark.parametrize("task", ["passkey", "niah", "vt"])
def test_the_plan_is_the_same_size_whatever_the_trial_count(task):
    """The cost items of 4 trials and of 10,000 have the same number of entries: the trial count
    is a count, not a list (fails when a task's cost lists one forward per trial)."""
    tasks = registry()
    sizes = []
    for trials in (4, 10_000):
        settings = build_settings(tasks[task], "none,ms-poe", "2", "2k,4k", {"trials": trials})
        sizes.append(sum(len(i.forwards) for i in tasks[task].cost(settings, 8192)))
    assert sizes[0] == sizes[1]


def test_ppl_documents_are_counted_not_listed():
    tasks = registry()
    sizes = [sum(len(i.forwards) for i in tasks["ppl"].cost(build_settings(tasks["ppl"], "none,dynamic", "2", "2k,4k",
                                                                                  {"docs": d, "metrics": "longppl,kl"}), 8192))
             for d in (1, 10_000)]  # fmt: skip
    assert sizes[0] == sizes[1]


def test_counts_cost_what_a_forward_per_trial_costs():
    """The plan's forwards, tokens and seconds are those of the trial-by-trial listing it replaced."""
    counted = _plan("passkey", trials=7)
    for share in (True, False):
        forwards, cached, counts = shared_prefix_cost([2048, 4096], [0.0, 0.5, 1.0], 7, share)
        listed, listed_cached = shared_prefix_forwards([2048, 4096], [0.0, 0.5, 1.0], 7, share)
        a = CostItem(cells=6, forwards=forwards, cached=cached, counts=counts)
        b = CostItem(cells=6, forwards=listed, cached=listed_cached)
        assert (a.tokens, a.forward_count) == (b.tokens, b.forward_count)
        assert sorted(r for n, c, k in a.runs() for r in [(n, c)] * k) == sorted(zip(listed, listed_cached, strict=True))
    job = counted.jobs[0]  # none shares its prefix (2 of them, 10 suffixes x 7); ms-poe prefills every trial whole
    assert (job.cells, job.forwards) == (2 * 2 * 5, (2 + 10 * 7) + 10 * 7)


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _cli(argv, tmp_path) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ctxbench", *argv, "--dry-run", "--out", str(tmp_path / "r.csv")],
                       capture_output=True, text=True, preexec_fn=_capped, timeout=60, cwd=tmp_path)  # fmt: skip
    return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0


# (argv, words of the one error line, the argv its fix gives)
HUGE = [
    (["passkey", "--trials", "100000000"], ["--trials 100000000", "10000"], ["passkey", "--trials", "10000"]),
    (["niah", "--trials", "auto", "--max-trials", str(10**9)], ["--max-trials 1000000000"], ["niah", "--trials", "auto", "--max-trials", "10000"]),
    (["passkey", "--trials", "auto", "--max-trials", "99999"], ["--max-trials 99999"], ["passkey", "--trials", "auto", "--max-trials", "10000"]),
    (["vt", "--trials", str(2**62)], ["--trials"], ["vt", "--trials", "10000"]),
    (["passkey", "--depths", "100000000"], ["--depths 100000000", "1000"], ["passkey", "--depths", "1000"]),
    (["niah", "--protocol", "exact", "--depths", "5000"], ["--depths 5000"], ["niah", "--protocol", "exact", "--depths", "1000"]),
    (["ppl", "--docs", str(10**9)], ["--docs 1000000000", "10000"], ["ppl", "--docs", "10000"]),
    (["ppl", "--len", "99999999m"], ["length '99999999m'", "16m"], ["ppl", "--len", "16m"]),
    (["passkey", "--len", str(2**40)], ["length", "16m"], ["passkey", "--len", "128k"]),
    (["ppl", "--stride", "999999999", "--len", "4k"], ["--stride '999999999'"], ["ppl", "--stride", "16m", "--len", "16m"]),
]


@pytest.mark.integration
@pytest.mark.parametrize(("argv", "words", "fixed"), HUGE, ids=[" ".join(c[0])[:40] for c in HUGE])
def test_huge_values_are_refused_at_once_under_a_memory_cap_and_the_fix_plans(argv, words, fixed, tmp_path):
    code, out, err, seconds = _cli(argv, tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and " — " in lines[0], err
    assert "Traceback" not in err and seconds < 15
    for word in words:
        assert word in lines[0], (word, lines[0])
    fix = lines[0].split(" — ", 1)[1]
    assert any(v in fix for v in fixed[1:] if not v.startswith("--")), (fixed, fix)  # the fix names the value used
    code, out, err, _ = _cli(fixed, tmp_path)  # the fix applied: a plan, under the same cap
    assert code == 0 and "plan " in out, err
    assert not (tmp_path / "r.csv").exists()  # a dry run writes nothing


# The largest values the ceilings allow plan in seconds under the cap: O(cells). Each option at
# its own ceiling, and their product at the grid's (10,000,000 trials and documents in all).
AT_CEILING = [
    ["passkey", "--trials", "10000", "--depths", "1000", "--len", "1k"],
    ["passkey", "--trials", "10000", "--len", "1k,16m"],
    ["niah", "--trials", "auto", "--max-trials", "10000", "--protocol", "exact", "--depths", "500", "--len", "1k", "--method", "none,ms-poe", "--metrics", "answer_nll"],
    ["ppl", "--docs", "10000", "--len", "16m", "--metrics", "longppl,kl"],
    ["ppl", "--docs", "10000", "--len", "16m", "--stride", "1"],
    ["vt", "--trials", "10000", "--len", "16m"],
]


@pytest.mark.integration
@pytest.mark.parametrize("argv", AT_CEILING, ids=[" ".join(a)[:40] for a in AT_CEILING])
def test_the_largest_plans_allowed_answer_in_seconds_under_a_memory_cap(argv, tmp_path):
    code, out, err, seconds = _cli(argv, tmp_path)
    assert code == 0 and "plan " in out, err
    assert seconds < 15, seconds
