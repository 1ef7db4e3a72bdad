"""scripts/run_workflows.py runs a workflow's steps as GitHub's runner does: bash -e, no venv on PATH,
GITHUB_PATH / GITHUB_ENV / GITHUB_STEP_SUMMARY between steps, ``if: always()``, the ``${{ }}`` forms
the workflows use (others refused), and a job that calls a reusable workflow. The committed
workflows resolve under it (CI runs them for real from .ci/run)."""

from __future__ import annotations

import importlib.util
import io
import sys
import textwrap

import pytest
from helpers import ROOT

SCRIPT = ROOT / "scripts" / "run_workflows.py"


@pytest.fixture(scope="module")
def rw():
    spec = importlib.util.spec_from_file_location("run_workflows", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _run(rw, tmp_path, workflow: str, name: str = "wf.yml", **extra):
    """Run one workflow text; returns (exit status, the runner's lines)."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(workflow))
    for other, text in extra.items():
        (folder / f"{other}.yml").write_text(textwrap.dedent(text))
    out = io.StringIO()
    opts = rw.Options(python=sys.executable, repo=tmp_path, work=tmp_path, out=out)
    try:
        results = rw.run_all([folder / name], opts)
    except rw.WorkflowError as exc:
        return 2, str(exc), []
    return (0 if all(r.ok for r in results) else 1), out.getvalue(), results


def _fake_tool(tmp_path):
    """A folder with a ``ctxbench`` that is on no PATH until a step puts it there."""
    tool = tmp_path / "venv-bin"
    tool.mkdir()
    (tool / "ctxbench").write_text("#!/bin/sh\necho ctxbench-ran \"$@\"\n")
    (tool / "ctxbench").chmod(0o755)
    return tool


STEPS = """\
on: workflow_dispatch
jobs:
  j:
    runs-on: ubuntu-latest
    steps:
      - name: install
        run: |
          echo installed{publish}
      - name: call
        run: ctxbench --version
"""


def test_a_step_calling_a_command_that_no_step_put_on_path_fails_the_job(rw, tmp_path):
    _fake_tool(tmp_path)
    code, lines, results = _run(rw, tmp_path, STEPS.format(publish=""))
    assert code == 1 and results[0].failed_step == "call"
    assert "exit 127 (command not found" in lines


def test_a_folder_a_step_appends_to_github_path_is_on_the_path_of_the_next_steps(rw, tmp_path, capfd):
    tool = _fake_tool(tmp_path)
    code, _, _ = _run(rw, tmp_path, STEPS.format(publish=f'\n          echo "{tool}" >> "$GITHUB_PATH"'))
    assert code == 0 and "ctxbench-ran --version" in capfd.readouterr().out


def test_steps_run_with_bash_e_and_no_virtual_environment(rw, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "some-venv"))
    wf = """\
    on: workflow_dispatch
    jobs:
      j:
        runs-on: ubuntu-latest
        steps:
          - run: |
              echo "venv=[${VIRTUAL_ENV:-}] path=$PATH"
              false
              echo "after false"
    """
    code, _, _ = _run(rw, tmp_path, wf)
    out = capfd.readouterr().out
    assert code == 1 and "venv=[]" in out and "after false" not in out
    assert ".venv" not in out.split("path=")[1] and sys.prefix not in out.split("path=")[1]


def test_github_env_and_the_step_summary_carry_between_steps_and_always_runs_after_a_failure(rw, tmp_path, capfd):
    wf = """\
    on: workflow_dispatch
    jobs:
      j:
        runs-on: ubuntu-latest
        steps:
          - run: |
              echo "GREETING=hello" >> "$GITHUB_ENV"
              printf 'NOTE<<EOF\\nline one\\nline two\\nEOF\\n' >> "$GITHUB_ENV"
          - run: echo "got $GREETING / $NOTE" && echo "summary one" >> "$GITHUB_STEP_SUMMARY"
          - name: breaks
            run: exit 3
          - name: skipped after a failure
            run: echo SHOULD-NOT-RUN
          - name: always
            if: always()
            run: echo "summary two" >> "$GITHUB_STEP_SUMMARY"
    """
    code, lines, results = _run(rw, tmp_path, wf)
    out = capfd.readouterr().out
    assert code == 1 and results[0].failed_step == "breaks"
    assert "got hello / line one\nline two" in out and "SHOULD-NOT-RUN" not in out
    assert "skipped after a failure: skipped" in lines
    assert results[0].summary == "summary one\nsummary two\n"


def test_expressions_take_inputs_vars_and_their_defaults(rw):
    ctx = rw.Context("wf.yml", vars={"SPEC": "torch==2"}, event_inputs={"rtol": ""}, inputs={"suite": "quick"})
    ev = lambda e: rw.evaluate(e, ctx, "here")  # noqa: E731
    assert ev("vars.SPEC || 'torch'") == "torch==2" and ev("vars.NONE || 'torch'") == "torch"
    assert ev("github.event.inputs.rtol || '0.02'") == "0.02" and ev("inputs.suite") == "quick"
    assert ev(" runner.os ") == "Linux" and ev("github.run_id").isdigit()
    assert rw.substitute("a-${{ runner.os }}-${{ 'x || y' }}", ctx, "here") == "a-Linux-x || y"


@pytest.mark.parametrize("expr", ["github.sha", "secrets.TOKEN", "matrix.python", "format('{0}', 1)", "inputs.a == 'b'"])
def test_an_expression_form_the_runner_does_not_simulate_is_refused_naming_it(rw, expr):
    ctx = rw.Context("wf.yml")
    with pytest.raises(rw.WorkflowError, match="not a") as info:
        rw.evaluate(expr, ctx, "wf.yml: job 'j': step 's'")
    assert "wf.yml: job 'j': step 's'" in str(info.value)


def test_an_unsimulated_if_is_refused_before_any_step_runs(rw, tmp_path, capfd):
    wf = """\
    on: workflow_dispatch
    jobs:
      j:
        runs-on: ubuntu-latest
        steps:
          - run: echo FIRST
          - if: github.ref == 'refs/heads/main'
            run: echo later
    """
    code, message, *_ = _run(rw, tmp_path, wf)
    assert code == 2 and "if: github.ref" in message


def test_a_job_calling_a_reusable_workflow_runs_its_steps_with_the_given_inputs(rw, tmp_path, capfd):
    caller = """\
    on:
      workflow_dispatch:
        inputs:
          rtol: {default: "0.02"}
    jobs:
      call:
        uses: ./.github/workflows/gate.yml
        with:
          suite: quick
          rtol: ${{ github.event.inputs.rtol || '0.05' }}
    """
    gate = """\
    on:
      workflow_call:
        inputs:
          suite: {type: string, required: true}
          rtol: {type: string, default: "0.1"}
          artifact: {type: string, default: "art"}
    jobs:
      gate:
        runs-on: ubuntu-latest
        env:
          SUITE: ${{ inputs.suite }}
        steps:
          - run: echo "suite=$SUITE rtol=${{ inputs.rtol }} artifact=${{ inputs.artifact }}"
    """
    code, _, results = _run(rw, tmp_path, caller, gate=gate)
    assert code == 0 and len(results) == 1
    assert "suite=quick rtol=0.02 artifact=art" in capfd.readouterr().out


# ---- the committed workflows -------------------------------------------------------------------


def _plan(rw, **inputs):
    out = io.StringIO()
    opts = rw.Options(python=sys.executable, inputs=inputs, plan=True, out=out)
    results = rw.run_all(sorted((ROOT / ".github" / "workflows").glob("*.yml")), opts)
    return results, out.getvalue()


def test_every_committed_workflow_resolves_under_the_runner(rw):
    results, lines = _plan(rw)
    assert [r.workflow for r in results] == ["nightly.yml: job 'nightly' -> ctxbench-gate.yml"]
    assert "ctxbench-gate.yml: reusable only, run through the workflows that call it" in lines
    assert "SUITE=nightly, BASELINE=results/baseline-nightly.csv, RTOL=0.02" in lines


def test_the_nightly_job_puts_what_setup_installed_on_the_path_before_calling_ctxbench(rw):
    gate = rw.load(ROOT / ".github" / "workflows" / "ctxbench-gate.yml")
    scripts = [s.get("run", "") for s in gate["jobs"]["gate"]["steps"]]
    install = next(i for i, s in enumerate(scripts) if "scripts/setup.sh" in s)
    assert 'echo "$PWD/.venv/bin" >> "$GITHUB_PATH"' in scripts[install]
    assert all("ctxbench" not in s.replace("ctxbench-", "") for s in scripts[:install])


def test_a_dispatch_with_inputs_reaches_the_gate_steps(rw):
    _, lines = _plan(rw, suite="tests/data/workflow-suite.toml", baseline="tests/data/workflow-baseline.csv")
    assert "SUITE=tests/data/workflow-suite.toml, BASELINE=tests/data/workflow-baseline.csv" in lines


def test_the_suite_ci_runs_the_workflows_with_matches_its_committed_baseline():
    """The baseline is the suite's real run: the same cells, so a rerun compares cell for cell."""
    from ctxbench.results.store import read_records
    from ctxbench.runner.suite import load_suite

    spec = load_suite(str(ROOT / "tests" / "data" / "workflow-suite.toml"))
    rows = read_records(ROOT / "tests" / "data" / "workflow-baseline.csv")
    assert spec.dtype == "float32" and {r["dtype"] for r in rows} == {"float32"}
    assert {r["task"] for r in rows} == {job.task.name for job in spec.jobs}
