#!/usr/bin/env python3
"""Runs the GitHub Actions workflows under ``.github/workflows/`` as GitHub's runner would, on a
clean clone of this repository, so that a workflow that cannot work fails CI instead of a user's
night (issue 44: the committed nightly job called a ``ctxbench`` that was not on its PATH).

    .venv/bin/python scripts/run_workflows.py --python /usr/bin/python3 \\
        --var CTXBENCH_TORCH_SPEC=torch==2.13.0 \\
        --input suite=tests/data/workflow-suite.toml --input baseline=tests/data/workflow-baseline.csv

What an ``ubuntu-latest`` job sees, and so what this runner gives each ``run:`` step:

- a clean clone of the committed tree (``actions/checkout``: ``git clone`` of HEAD, so uncommitted
  changes are not in it) as the working directory, ``$GITHUB_WORKSPACE``;
- a minimal environment: no virtual environment active (``VIRTUAL_ENV``, ``CONDA_PREFIX`` unset),
  ``PATH`` the image's system folders only, ``actions/setup-python`` prepending a folder whose
  ``python``/``python3`` are ``--python`` (default: the base interpreter of the Python running
  this script, never a venv's); the host's package-index settings (``PIP_*``, proxies, CA
  bundles) are passed through, as a GitHub runner reaches PyPI directly;
- the step's shell as GitHub runs it: ``bash -e {0}`` where no ``shell:`` is given,
  ``bash --noprofile --norc -eo pipefail {0}`` for ``shell: bash``, ``sh -e {0}`` for ``sh``;
- ``$GITHUB_PATH``, ``$GITHUB_ENV`` and ``$GITHUB_OUTPUT`` honoured between steps, and each step's
  ``$GITHUB_STEP_SUMMARY`` gathered into the job summary (``--summary FILE`` keeps it);
- ``if:`` as GitHub reads it: a step runs while every earlier one succeeded, ``always()``
  regardless, ``failure()`` only after a failure; ``continue-on-error: true``;
- ``${{ }}`` expressions of the forms the workflows use: ``vars.X``, ``inputs.X``,
  ``github.event.inputs.X``, ``env.X``, ``github.run_id`` (and ``run_number``, ``workspace``,
  ``event_name``, ``job``), ``runner.os``/``temp``/``arch``, ``hashFiles('glob', ...)``, string
  literals, and ``a || b || 'default'``. Any other form is refused in one line naming the file,
  the step and the expression (exit 2): a form that is not simulated is not silently wrong;
- ``uses:`` steps: ``actions/checkout`` and ``actions/setup-python`` simulated as above; others
  (``actions/cache``, ``actions/upload-artifact``...) skipped with a line saying so (an upload's
  paths are checked to exist); a job that ``uses: ./.github/workflows/X.yml`` runs that reusable
  workflow with its ``with:`` as ``inputs`` (a workflow only called that way is run through its
  callers, not on its own).

Events: a workflow with ``workflow_dispatch`` runs as dispatched by hand, its declared inputs at
their defaults unless ``--input NAME=VALUE`` gives them; a workflow only triggered by
``workflow_call`` gets ``--input`` values as its ``inputs``. ``--var NAME=VALUE`` sets a repository
variable (``vars.NAME``), as a repository's settings do.

CI (``.ci/run``) runs the nightly workflow this way with the suite ``tests/data/workflow-suite.toml``
(seconds, not the nightly suite's half hour; every step is the nightly job's) and its committed
baseline. ``--plan`` resolves every workflow and prints the steps without running anything.

Exit status: 0 every job passed, 1 a job failed, 2 a workflow uses what this runner cannot
simulate, or a bad argument.
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]  # ubuntu-latest, less its tool caches
PASS_THROUGH = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")  # fmt: skip
PASS_THROUGH_PREFIXES = ("PIP_",)  # the host's package index: a GitHub runner reaches PyPI directly
SHELLS = {
    None: ["bash", "-e", "{0}"],
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail", "{0}"],
    "sh": ["sh", "-e", "{0}"],
}
FORMS = ("vars.X, inputs.X, github.event.inputs.X, env.X, github.run_id|run_number|workspace|event_name|job, "
         "runner.os|temp|arch, hashFiles('glob'), 'literal', a || b")  # fmt: skip
STATUS_IFS = {"always()": "always", "success()": "success", "failure()": "failure", "cancelled()": "never", "!cancelled()": "always"}
SIMULATED = ("actions/checkout", "actions/setup-python")
SKIPPED = ("actions/cache", "actions/upload-artifact", "actions/download-artifact")
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
PATH_FORM = re.compile(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*$")
CALL_FORM = re.compile(r"hashFiles\((.*)\)$", re.S)


class WorkflowError(Exception):
    """The workflow uses a form this runner does not simulate, or is malformed: exit 2."""


@dataclass
class Context:
    """What ``${{ }}`` expressions read."""

    workflow: str
    vars: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    event_inputs: dict[str, str] = field(default_factory=dict)
    event_name: str = "workflow_dispatch"
    env: dict[str, str] = field(default_factory=dict)
    job: str = ""
    run_id: str = "1"
    workspace: Path = ROOT
    temp: Path = Path(tempfile.gettempdir())

    def lookup(self, path: str, where: str) -> str:
        head, _, rest = path.partition(".")
        tables = {"vars": self.vars, "inputs": self.inputs, "env": self.env}
        if head in tables and rest and "." not in rest:
            return str(tables[head].get(rest, ""))
        if path.startswith("github.event.inputs.") and path.count(".") == 3:
            return str(self.event_inputs.get(path.rsplit(".", 1)[1], ""))
        known = {
            "github.run_id": self.run_id, "github.run_number": "1", "github.workspace": str(self.workspace),
            "github.event_name": self.event_name, "github.job": self.job,
            "runner.os": "Linux", "runner.arch": "X64", "runner.temp": str(self.temp),
        }  # fmt: skip
        if path in known:
            return known[path]
        raise WorkflowError(f"{where}: '{path}' is not a context this runner simulates (it knows {FORMS})")


def _split_or(expr: str) -> list[str]:
    """``a || b`` -> ``['a', 'b']``, ignoring ``||`` inside quotes."""
    parts, buf, quoted, i = [], "", False, 0
    while i < len(expr):
        ch = expr[i]
        if ch == "'":
            quoted = not quoted
        if not quoted and expr.startswith("||", i):
            parts.append(buf.strip())
            buf, i = "", i + 2
            continue
        buf += ch
        i += 1
    return [*parts, buf.strip()]


def _literal(text: str) -> str | None:
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return None


def _hash_files(args: str, ctx: Context, where: str) -> str:
    patterns = [_literal(a.strip()) for a in args.split(",")]
    if any(p is None for p in patterns):
        raise WorkflowError(f"{where}: hashFiles takes quoted patterns, got hashFiles({args})")
    digest, found = hashlib.sha256(), False
    for pattern in patterns:
        for name in sorted(glob.glob(str(ctx.workspace / pattern), recursive=True)):
            if os.path.isfile(name):
                digest.update(hashlib.sha256(Path(name).read_bytes()).digest())
                found = True
    return digest.hexdigest() if found else ""


def evaluate(expr: str, ctx: Context, where: str) -> str:
    """The value of one ``${{ }}`` expression (its inside): the first non-empty operand of ``||``."""
    value = ""
    for operand in _split_or(expr.strip()):
        literal = _literal(operand)
        if literal is not None:
            value = literal
        elif (call := CALL_FORM.match(operand)) is not None:
            value = _hash_files(call.group(1), ctx, where)
        elif PATH_FORM.match(operand):
            value = ctx.lookup(operand, where)
        else:
            raise WorkflowError(f"{where}: the expression '${{{{ {expr.strip()} }}}}' is not a form this runner simulates "
                                f"(it knows {FORMS})")  # fmt: skip
        if value:
            return value
    return value


def substitute(text, ctx: Context, where: str):
    """``text`` with every ``${{ }}`` replaced by its value (a non-string is returned as it is)."""
    if not isinstance(text, str):
        return text
    return EXPR.sub(lambda m: evaluate(m.group(1), ctx, where), text)


def status_if(condition, where: str) -> str:
    """``always`` | ``success`` | ``failure`` | ``never``: when a step or job with this ``if:`` runs."""
    if condition is None:
        return "success"
    text = str(condition).strip()
    inner = EXPR.fullmatch(text)
    text = inner.group(1).strip() if inner else text
    if text not in STATUS_IFS:
        raise WorkflowError(f"{where}: 'if: {condition}' is not a form this runner simulates (it knows {', '.join(STATUS_IFS)})")
    return STATUS_IFS[text]


def triggers(workflow: dict) -> dict:
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return dict.fromkeys(on, {})
    return {k: v or {} for k, v in (on or {}).items()}


def load(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise WorkflowError(f"{path.name}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict) or not data["jobs"]:
        raise WorkflowError(f"{path.name}: a workflow needs a `jobs:` mapping")
    return data


def declared_inputs(spec: dict, given: dict[str, str], where: str, required_ok: bool = False) -> dict[str, str]:
    """The inputs a trigger declares, at their defaults unless ``given`` names them."""
    out = {}
    for name, decl in (spec.get("inputs") or {}).items():
        decl = decl or {}
        if name in given:
            out[name] = given[name]
        elif "default" in decl:
            out[name] = str(decl["default"]).lower() if isinstance(decl["default"], bool) else str(decl["default"])
        elif decl.get("required") and not required_ok:
            raise WorkflowError(f"{where}: the input '{name}' is required and has no default — pass --input {name}=VALUE")
        else:
            out[name] = ""
    return out


# ---- running ---------------------------------------------------------------------------------


@dataclass
class Options:
    python: str
    repo: Path = ROOT
    vars: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)
    plan: bool = False
    summary: Path | None = None
    work: Path | None = None
    keep: bool = False
    out: object = None  # a text stream for the runner's own lines (default stdout)

    def say(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)


@dataclass
class JobResult:
    workflow: str
    job: str
    ok: bool
    failed_step: str = ""
    summary: str = ""
    seconds: float = 0.0


def _read_env_file(path: Path, where: str) -> dict[str, str]:
    """``NAME=value`` lines and ``NAME<<DELIM`` ... ``DELIM`` blocks (GitHub's GITHUB_ENV/GITHUB_OUTPUT)."""
    out, lines, i = {}, path.read_text().splitlines() if path.exists() else [], 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == delim), None)
            if end is None:
                raise WorkflowError(f"{where}: '{line}' in {path.name} has no closing '{delim}' line")
            out[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        if line.strip():
            if "=" not in line:
                raise WorkflowError(f"{where}: '{line}' in {path.name} is neither NAME=value nor NAME<<DELIM")
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


def _base_env(opts: Options) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASS_THROUGH or k.startswith(PASS_THROUGH_PREFIXES)}
    env.update(CI="true", GITHUB_ACTIONS="true", RUNNER_OS="Linux", RUNNER_ARCH="X64")
    env.update(opts.extra_env)
    return env


def _tool_dir(opts: Options, work: Path) -> Path:
    """What actions/setup-python puts first on PATH: ``python`` and ``python3`` as the chosen interpreter."""
    tool = work / "tool" / "python" / "bin"
    tool.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        link = tool / name
        if not link.exists():
            link.symlink_to(opts.python)
    return tool


class Job:
    """One job's steps, run in order in one workspace with one PATH and one environment."""

    def __init__(self, name: str, spec: dict, wf: dict, ctx: Context, opts: Options, work: Path) -> None:
        self.name, self.spec, self.wf, self.ctx, self.opts, self.work = name, spec, wf, ctx, opts, work
        self.where = f"{ctx.workflow}: job '{name}'"
        self.path: list[str] = []  # GITHUB_PATH entries, newest first
        self.env: dict[str, str] = {}  # GITHUB_ENV
        self.summary: list[str] = []
        defaults = {**((wf.get("defaults") or {}).get("run") or {}), **((spec.get("defaults") or {}).get("run") or {})}
        self.default_shell, self.default_dir = defaults.get("shell"), defaults.get("working-directory")
        for key in ("strategy", "container", "services"):
            if key in spec:
                raise WorkflowError(f"{self.where}: `{key}:` is not simulated by this runner")

    def steps(self) -> list[dict]:
        steps = self.spec.get("steps")
        if not isinstance(steps, list) or not steps:
            raise WorkflowError(f"{self.where}: a job needs `steps:` (or `uses:` of a reusable workflow)")
        return steps

    def step_env(self, step: dict, where: str) -> dict[str, str]:
        """The workflow's, job's and step's ``env:``, in that order, each value resolved (``env.X`` reads
        $GITHUB_ENV and what the scopes before set)."""
        env: dict[str, str] = {}
        for scope in (self.wf.get("env"), self.spec.get("env"), step.get("env")):
            for k, v in (scope or {}).items():
                self.ctx.env = {**self.env, **env}
                env[k] = str(substitute(v, self.ctx, where))
        return env

    def run(self) -> JobResult:
        start, failed_step = time.monotonic(), ""
        self.ctx.job = self.name
        self.ctx.workspace = self.opts.repo if self.opts.plan else self.work / "workspace" / self.opts.repo.name
        self.ctx.temp = self.work / "runner-temp"
        if not self.opts.plan:
            self.ctx.workspace.mkdir(parents=True, exist_ok=True)
            self.ctx.temp.mkdir(parents=True, exist_ok=True)
        for i, step in enumerate(self.steps()):
            label = step.get("name") or step.get("uses") or (str(step.get("run", "")).strip().splitlines() or [f"step {i + 1}"])[0][:60]
            where = f"{self.where}: step '{label}'"
            when = status_if(step.get("if"), where)
            runs = self.opts.plan or when == "always" or (when == "success" and not failed_step) or (when == "failure" and failed_step)
            if not runs:
                self.opts.say(f"--- {label}: skipped (an earlier step failed; `if:` does not ask for always())")
                continue
            env = self.step_env(step, where)
            self.ctx.env = {**self.env, **env}
            if "uses" in step:
                ok = self.uses(step, where, label)
            elif "run" in step:
                ok = self.run_script(step, env, where, label)
            else:
                raise WorkflowError(f"{where}: a step needs `run:` or `uses:`")
            if not ok and step.get("continue-on-error") is True:
                self.opts.say(f"--- {label}: failed, continue-on-error: true")
            elif not ok and not failed_step:
                failed_step = label
        return JobResult(self.ctx.workflow, self.name, not failed_step, failed_step, "".join(self.summary), time.monotonic() - start)

    def uses(self, step: dict, where: str, label: str) -> bool:
        action = str(step["uses"]).split("@", 1)[0]
        with_ = {k: substitute(v, self.ctx, where) for k, v in (step.get("with") or {}).items()}
        if action == "actions/checkout":
            if self.opts.plan:
                self.opts.say(f"--- {label}: would clone {self.opts.repo} (HEAD) into the workspace")
                return True
            if any(self.ctx.workspace.iterdir()):
                self.opts.say(f"--- {label}: the workspace already holds the clone")
                return True
            subprocess.run(["git", "clone", "--quiet", str(self.opts.repo), str(self.ctx.workspace)], check=True)
            head = subprocess.run(["git", "-C", str(self.ctx.workspace), "log", "-1", "--format=%h %s"], capture_output=True, text=True).stdout.strip()
            self.opts.say(f"--- {label}: cloned {self.opts.repo} at {head[:90]}")
            return True
        if action == "actions/setup-python":
            version = subprocess.run([self.opts.python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                                     text=True).stdout.strip() if not self.opts.plan else "?"  # fmt: skip
            asked = with_.get("python-version", "")
            self.opts.say(f"--- {label}: python {asked or '(any)'} asked; PATH gets {self.opts.python} ({version}) as python, python3")
            if not self.opts.plan:
                self.path.insert(0, str(_tool_dir(self.opts, self.work)))
            return True
        if action.startswith("./"):
            raise WorkflowError(f"{where}: local actions ({action}) are not simulated by this runner")
        if action == "actions/upload-artifact" and not self.opts.plan:
            paths = [p.strip() for p in str(with_.get("path", "")).splitlines() if p.strip()]
            have = [p for p in paths if (self.ctx.workspace / p).exists()]
            missing = [p for p in paths if p not in have]
            self.opts.say(f"--- {label}: not uploaded (simulated); present: {', '.join(have) or 'none'}"
                          + (f"; missing: {', '.join(missing)}" if missing else ""))  # fmt: skip
            return True
        why = "not simulated: nothing to cache or upload here" if action in SKIPPED else "not simulated by this runner"
        self.opts.say(f"--- {label}: skipped ({action}: {why})")
        return True

    def run_script(self, step: dict, env: dict[str, str], where: str, label: str) -> bool:
        script = substitute(str(step["run"]), self.ctx, where)
        shell = step.get("shell", self.default_shell)
        if shell not in SHELLS:
            raise WorkflowError(f"{where}: `shell: {shell}` is not simulated by this runner (it knows bash, sh or none)")
        workdir = substitute(step.get("working-directory", self.default_dir), self.ctx, where)
        if self.opts.plan:
            shown = {k: v for k, v in env.items() if k not in (self.wf.get("env") or {})}
            self.opts.say(f"--- {label}: {' '.join(SHELLS[shell])}" + "".join(f"\n    {line}" for line in script.splitlines())
                          + (f"\n    (env: {', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else ""))  # fmt: skip
            return True
        files = {k: self.ctx.temp / f"{k.lower()}-{time.monotonic_ns()}" for k in ("GITHUB_PATH", "GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
        for f in files.values():
            f.touch()
        script_file = self.ctx.temp / f"step-{time.monotonic_ns()}.sh"
        script_file.write_text(script + "\n")
        full = {**_base_env(self.opts), **self.env, **env, **{k: str(v) for k, v in files.items()}}
        full.update(PATH=":".join([*self.path, *SYSTEM_PATH]), GITHUB_WORKSPACE=str(self.ctx.workspace), GITHUB_RUN_ID=self.ctx.run_id,
                    GITHUB_EVENT_NAME=self.ctx.event_name, GITHUB_JOB=self.name, RUNNER_TEMP=str(self.ctx.temp))  # fmt: skip
        cwd = self.ctx.workspace / workdir if workdir else self.ctx.workspace
        self.opts.say(f"--- {label}: {' '.join(SHELLS[shell])}" + "".join(f"\n    | {line}" for line in script.splitlines()))
        argv = [a.replace("{0}", str(script_file)) for a in SHELLS[shell]]
        argv[0] = shutil.which(argv[0], path=":".join(SYSTEM_PATH)) or argv[0]
        code = subprocess.run(argv, cwd=cwd, env=full, stdin=subprocess.DEVNULL).returncode
        self.summary.append(files["GITHUB_STEP_SUMMARY"].read_text())
        if code != 0:
            hint = " (command not found: a command the step calls is not on the step's PATH)" if code == 127 else ""
            self.opts.say(f"--- {label}: FAILED, exit {code}{hint}")
            return False
        for line in files["GITHUB_PATH"].read_text().splitlines():
            if line.strip():
                self.path.insert(0, line.strip())
        self.env.update(_read_env_file(files["GITHUB_ENV"], where))
        _read_env_file(files["GITHUB_OUTPUT"], where)  # checked for its format; no step reads outputs yet
        return True


def _order(jobs: dict, where: str) -> list[str]:
    done: list[str] = []
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if all(n in done for n in _needs(jobs[j]))]
        if not ready:
            raise WorkflowError(f"{where}: the jobs' `needs:` name a job that is missing or form a cycle: {', '.join(pending)}")
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def _needs(job: dict) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def run_workflow(path: Path, opts: Options, inputs: dict[str, str] | None = None, caller: str = "") -> list[JobResult]:
    """Every job of the workflow at ``path``, in ``needs:`` order; ``inputs``: a reusable workflow's,
    from its caller's ``with:``."""
    wf = load(path)
    on = triggers(wf)
    name = (f"{caller} -> " if caller else "") + path.name
    if inputs is not None:
        if "workflow_call" not in on:
            raise WorkflowError(f"{caller}: {path.name} is called with `uses:` but has no `on: workflow_call`")
        ctx = Context(name, vars=opts.vars, inputs=declared_inputs(on["workflow_call"], inputs, name), event_name="workflow_call")
        unknown = set(inputs) - set(on["workflow_call"].get("inputs") or {})
        if unknown:
            raise WorkflowError(f"{caller}: `with:` gives {', '.join(sorted(unknown))}, which {path.name} does not declare as inputs")
    elif "workflow_dispatch" in on:
        ctx = Context(name, vars=opts.vars, event_inputs=declared_inputs(on["workflow_dispatch"], opts.inputs, name))
    elif "workflow_call" in on:
        ctx = Context(name, vars=opts.vars, inputs=declared_inputs(on["workflow_call"], opts.inputs, name), event_name="workflow_call")
    else:
        ctx = Context(name, vars=opts.vars, event_name=next(iter(on), "push"))
    results: list[JobResult] = []
    for job_name in _order(wf["jobs"], name):
        spec = wf["jobs"][job_name] or {}
        where = f"{name}: job '{job_name}'"
        when = status_if(spec.get("if"), where)
        failed = any(not r.ok for r in results)
        if not opts.plan and not (when == "always" or (when == "success" and not failed) or (when == "failure" and failed)):
            opts.say(f"=== {where}: skipped (a job it follows failed)")
            continue
        if "uses" in spec:
            target = str(spec["uses"])
            if not target.startswith("./"):
                raise WorkflowError(f"{where}: `uses: {target}`: only a reusable workflow of this repository (./.github/workflows/...) is simulated")
            with_ = {k: str(substitute(v, ctx, where)) for k, v in (spec.get("with") or {}).items()}
            opts.say(f"=== {where}: calls {target} with {', '.join(f'{k}={v}' for k, v in with_.items()) or 'no inputs'}")
            results += run_workflow(_workflow_file(target, path, where), opts, with_, caller=where)
            continue
        opts.say(f"=== {where} ({spec.get('runs-on', '?')})")
        work = Path(tempfile.mkdtemp(prefix="job-", dir=opts.work)) if not opts.plan else Path(tempfile.gettempdir())
        try:
            result = Job(job_name, spec, wf, ctx, opts, work).run()
        finally:
            if not opts.plan and not opts.keep:
                shutil.rmtree(work, ignore_errors=True)
        verdict = "planned" if opts.plan else "passed" if result.ok else f"FAILED at '{result.failed_step}'"
        opts.say(f"=== {where}: {verdict} ({result.seconds:.0f} s)")
        results.append(result)
    return results


def _workflow_file(target: str, caller: Path, where: str) -> Path:
    rel = target.split("@", 1)[0].removeprefix("./")
    # the caller sits in <repo>/.github/workflows/; a local `uses:` is relative to the repository root
    path = caller.parent.parent.parent / rel
    if not path.is_file():
        raise WorkflowError(f"{where}: `uses: {target}`: no such file {rel}")
    return path


def called_workflows(paths: list[Path]) -> set[str]:
    """Names of the workflow files that another one calls with a job-level ``uses: ./...``."""
    out = set()
    for path in paths:
        for spec in (load(path).get("jobs") or {}).values():
            target = str((spec or {}).get("uses", ""))
            if target.startswith("./"):
                out.add(Path(target.split("@", 1)[0]).name)
    return out


def run_all(workflows: list[Path], opts: Options) -> list[JobResult]:
    called = called_workflows(workflows)
    results: list[JobResult] = []
    for path in workflows:
        on = triggers(load(path))
        if path.name in called and set(on) == {"workflow_call"}:
            opts.say(f"=== {path.name}: reusable only, run through the workflows that call it")
            continue
        results += run_workflow(path, opts)
    return results


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for v in values or []:
        if "=" not in v:
            raise WorkflowError(f"{flag} '{v}' is not NAME=VALUE")
        k, val = v.split("=", 1)
        out[k] = val
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workflows", nargs="*", help="workflow files (default: every .yml/.yaml under .github/workflows/ of --repo)")
    parser.add_argument("--repo", default=str(ROOT), help="the repository actions/checkout clones (its HEAD)")
    parser.add_argument("--python", default=getattr(sys, "_base_executable", sys.executable),
                        help="the interpreter actions/setup-python puts on PATH (default: this Python's base, never a venv's)")
    parser.add_argument("--var", action="append", help="a repository variable, NAME=VALUE (vars.NAME)")
    parser.add_argument("--input", action="append", help="a dispatch or workflow_call input, NAME=VALUE")
    parser.add_argument("--env", action="append", help="an extra variable of every step's environment, NAME=VALUE")
    parser.add_argument("--summary", help="write the jobs' step summaries ($GITHUB_STEP_SUMMARY) to this file")
    parser.add_argument("--work", help="folder for the workspaces (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the workspaces")
    parser.add_argument("--plan", action="store_true", help="resolve every workflow and print its steps; run nothing")
    args = parser.parse_args(argv)
    try:
        repo = Path(args.repo).resolve()
        if args.workflows:
            workflows = [Path(w).resolve() for w in args.workflows]
        else:
            workflows = sorted(p for p in (repo / ".github" / "workflows").glob("*") if fnmatch.fnmatch(p.name, "*.y*ml"))
        if not workflows:
            raise WorkflowError(f"no workflow files under {repo / '.github' / 'workflows'}")
        python = shutil.which(args.python) or args.python
        if not os.access(python, os.X_OK):
            raise WorkflowError(f"--python {args.python} is not an executable interpreter")
        work = Path(args.work).resolve() if args.work else None
        if work:
            work.mkdir(parents=True, exist_ok=True)
        opts = Options(python=python, repo=repo, vars=_pairs(args.var, "--var"), inputs=_pairs(args.input, "--input"),
                       extra_env=_pairs(args.env, "--env"), plan=args.plan, work=work, keep=args.keep)  # fmt: skip
        results = run_all(workflows, opts)
    except WorkflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.summary:
        Path(args.summary).write_text("".join(r.summary for r in results))
    bad = [r for r in results if not r.ok]
    for r in results:
        print(f"{'ok    ' if r.ok else 'FAILED'} {r.workflow}: job '{r.job}'" + (f" at step '{r.failed_step}'" if not r.ok else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
