"""SIGINT and SIGTERM mid-run: one line saying how many cells the file keeps and the command that
resumes, the right exit code, no traceback, and a file that resumes where it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ctxbench.results.identity import finished
from ctxbench.results.store import read_records

pytestmark = pytest.mark.integration  # runs the CLI or Python in a subprocess


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_run_says_what_is_kept_and_how_to_resume(tmp_path, saved_model, corpus_dir, sig, code):
    out = tmp_path / "r.csv"
    argv = [sys.executable, "-m", "ctxbench", "ppl", "--model", str(saved_model), "--method", "none,ntk,yarn,linear,llama3",
            "--factor", "2,4,8", "--len", "32,48,64", "--docs", "3", "--dataset", str(corpus_dir), "--out", str(out)]  # fmt: skip
    # the run gets SIGINT's default disposition, as from a terminal: a test suite started in the
    # background (`cmd &`) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.time() + 120
    while not out.exists() and time.time() < deadline:  # the first cell is saved
        time.sleep(0.05)
    assert out.exists(), "no cell was written"
    assert proc.poll() is None, "the run finished before the signal could be sent"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1 and lines[0].startswith(f"interrupted ({signal.Signals(sig).name}):"), stderr
    kept = len(finished(read_records(out)))
    assert f"{kept} finished cell(s) kept in {out}" in lines[0]
    assert "resume with: ctxbench ppl --model" in lines[0] and "--out" in lines[0]
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{kept} resumed" in again.stdout



def test_a_signal_taken_by_another_thread_mid_save_is_raised_after_the_save():
    # torch's worker threads do not block signals, so the kernel may hand SIGINT to one of them
    # while the main thread saves a cell; the save must still finish before KeyboardInterrupt.
    from ctxbench.results.store import signals_deferred

    go, sent = threading.Event(), threading.Event()

    def worker():  # started before the save, so its signal mask is the process's usual one
        go.wait(10)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    # Python's own SIGINT handler, as a terminal gives it (a suite run in the background has it ignored)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        steps = []
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                go.set()
                sent.wait(10)
                for i in range(100_000):  # bytecode boundaries at which Python would run a noted handler
                    steps.append(i)
                steps.append("saved")
        thread.join()
    finally:
        signal.signal(signal.SIGINT, before)
    assert steps[-1] == "saved"
