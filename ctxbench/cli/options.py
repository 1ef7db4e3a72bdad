"""What commands share: the typer options of the task commands (and of ``sweep``/``tune`` where
they have the same option), the one builder of the runner's model settings from a command's option
values (:func:`model_config`), the call of the runner (:func:`run`, :func:`exit_if_failed`) and the check every command's
values pass first (:func:`refuse_empty`).

Each default is read from where it is defined (``ctxbench.defaults``, ``ctxbench.backends``), never
restated here."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import fields

import typer

from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.cli.console import console, err
from ctxbench.defaults import (
    DEFAULT_ATTN,
    DEFAULT_DEVICE,
    DEFAULT_DTYPE,
    DEFAULT_FACTOR,
    DEFAULT_MODEL,
    DEFAULT_SEED,
)
from ctxbench.errors import UserError

MODEL = typer.Option(DEFAULT_MODEL, "--model", "-m", help=f"hub id, local dir, .gguf file or alias ({DEFAULT_MODEL})")
METHOD = typer.Option("none", "--method", help="comma list of methods, e.g. none,ntk,yarn or ntk+logn (see `ctxbench methods`)")
FACTOR = typer.Option(f"{DEFAULT_FACTOR:g}", "--factor", "-f", help="comma list of scale factors >= 1")
PARAM = typer.Option(None, "--param", "-p", help="method parameter key=value (repeatable), e.g. beta_fast=16")
DEVICE = typer.Option(DEFAULT_DEVICE, "--device", help="auto | cpu | cuda")
DTYPE = typer.Option(DEFAULT_DTYPE, "--dtype", help="auto (bf16 on CUDA; on a CPU bf16 where a probe finds it faster and parity holds, else fp32) | float32 | bfloat16 | float16")
ATTN = typer.Option(DEFAULT_ATTN, "--attn", help="attention kernel: sdpa | flash_attention_2 | eager")
SEED = typer.Option(DEFAULT_SEED, "--seed", help="random seed (passkey keys, sampling of anything random)")
RESUME = typer.Option(True, "--resume/--no-resume", help="skip cells already in --out (default) or start the file afresh")
TRUST = typer.Option(False, "--trust-remote-code", help="allow a hub model's own code to run (off by default)")
DEVICE_MAP = typer.Option(None, "--device-map", help="accelerate device map, e.g. auto, to spread a big model over GPUs")
QUANT = typer.Option(None, "--quantization", help="8bit | 4bit (needs bitsandbytes and a GPU)")
BACKEND = typer.Option(DEFAULT_BACKEND, "--backend", help="what runs the model: hf (transformers, the reference) | vllm (an engine; the methods vLLM expresses, checked against ctxbench's tables) | llamacpp (llama.cpp through llama-cpp-python; GGUF files as they are, checked against transformers' numbers)")
TENSOR_PARALLEL = typer.Option(1, "--tensor-parallel", help="with --backend vllm: GPUs one engine spans (vLLM's tensor parallelism)")
DRY_RUN = typer.Option(False, "--dry-run", help="print the plan (cells, tokens, rough time) and stop; load nothing")


def model_config(values: Mapping):
    """The runner's :class:`~ctxbench.runner.grid.ModelConfig` from a command's option values: each
    of its fields the command has (``--model``, ``--device``, ... ``--tensor-parallel``); a field the
    command lacks keeps the runner's default."""
    from ctxbench.runner.grid import ModelConfig  # start-up: loads filelock

    return ModelConfig(**{f.name: values[f.name] for f in fields(ModelConfig) if f.name in values})


def run(jobs: list, values: Mapping, out: str | None, before_plan: Callable[[], None] | None = None):
    """Hand ``jobs`` to the runner (:func:`ctxbench.runner.grid.execute`) with the command's model
    settings (:func:`model_config`), ``--resume``, ``--seed`` and ``--dry-run``; its progress and
    plan on :data:`~ctxbench.cli.console.console`. A dry run calls ``before_plan`` once the runner's
    checks pass, before it prints the plan. Returns the runner's outcome, for
    :func:`exit_if_failed` once the command has done the rest of its work."""
    from ctxbench.runner.grid import execute  # start-up: loads filelock

    return execute(jobs, model_config(values), out, values["resume"], values["seed"], console=console,
                   dry_run=values["dry_run"], before_plan=before_plan)  # fmt: skip


def exit_if_failed(outcome) -> None:
    """A run with failed cells (out of memory, a NaN or inf result) exits 1 with one line saying which
    and why: a script or CI job must not read a grid with holes as a success. Its rows are in the
    file with that status, and the same command runs them again."""
    if outcome.failed:
        first = outcome.failures[0] if outcome.failures else "see the status column of the results"
        more = f" (and {outcome.failed - 1} more)" if outcome.failed > 1 else ""
        err.print(f"failed: {outcome.failed} cell(s): {first}{more} — their rows say so, and the same command runs them again",
                  markup=False)  # fmt: skip
        raise typer.Exit(1)


def _flag_of(name: str, default) -> tuple[str, bool]:
    """(how the user typed a parameter, whether it has a default to fall back on): its first
    ``--flag``, or an argument's name in capitals."""
    decls = [d for d in (getattr(default, "param_decls", None) or ()) if d.startswith("--")]
    if decls:
        return decls[0].split("/")[0], getattr(default, "default", None) is not ...
    return name.upper(), False


def refuse_empty(callback):
    """``callback`` refusing an empty or blank text value (``--out ''``, ``--baseline ''``, a
    ``--param ''``, an empty file argument) in one line naming the flag: click passes ``''``
    through, and the commands read it as "not given" (``if baseline:``) or as a path, so the
    value the user typed was silently dropped or mis-read. One wrapper for every command, so a
    command added later is covered too."""
    signature = inspect.signature(callback)

    @functools.wraps(callback)
    def checked(*args, **values):
        for name, value in values.items():
            items = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, str) and not v.strip() for v in items):
                flag, optional = _flag_of(name, signature.parameters[name].default)
                fix = f"give a value, or drop {flag} for its default" if optional else f"give a value (see `ctxbench {callback.__name__} --help`)"
                raise UserError(f"{flag} {next(v for v in items if isinstance(v, str) and not v.strip())!r} is empty", fix)
        return callback(*args, **values)

    return checked
