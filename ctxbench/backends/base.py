"""The engine: a loaded model behind one interface, like lm-evaluation-harness's ``LM``.

The runner and the tasks hold an :class:`Engine` and call its methods; they never ask which engine
it is. A task asks it for a :class:`Session` -- one method setting at one factor, for sequences of
up to ``seq_len`` tokens -- and asks that session for per-token losses and greedy answers. The
runner asks the engine for everything else (checks, plan costs, engine starts, progress, close).

A backend is one module of this package with three names (:class:`BackendModule`): ``NAME``,
``check`` (before anything loads) and ``load`` (which returns an :class:`Engine` subclass).
In-process engines (transformers) keep the defaults below: nothing starts, nothing is reserved,
nothing is closed. ``tests/backends/test_engine_contract.py`` holds every engine to this contract.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: nothing here is imported at run time
    import torch

    from ctxbench.methods.setting import MethodSetting
    from ctxbench.model.decoding import Answer, Scored
    from ctxbench.model.size import ModelSize
    from ctxbench.model.thinking import Thinking

# ``finished(i, tokens)``: prompt ``i``'s answer so far is final (its decoding may stop)
Finished = Callable[[int, Sequence[int]], bool]
# ``timed(lengths, steps)`` of :meth:`Engine.calibration`
Timed = Callable[[tuple[int, ...], int], Iterable[tuple[int, float, float]]]


class Session(Protocol):
    """One method setting applied for sequences of up to ``seq_len`` tokens."""

    def token_nll(self, ids: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        """(n - 1,) float32 NLL of tokens 1..n-1 of ``ids`` (a (n,) tensor), each given all before it."""

    def sliding_nll(self, ids: torch.Tensor, window: int, stride: int, chunk: int = 1024) -> torch.Tensor:
        """(n - 1,) float32 NLL with windows of ``window`` tokens advancing by ``stride``
        (:func:`ctxbench.model.scoring.sliding_nll`'s protocol)."""

    def answers(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, finished: Finished | None = None, share: bool = True,
                continuations: Sequence[Sequence[int]] | None = None, think: Thinking | None = None) -> Iterator[Answer]:  # fmt: skip
        """Greedy answers (:class:`ctxbench.model.decoding.Answer`, any order) of every prompt, stopping
        at the model's stop tokens; with ``continuations``, each answer's ``nll`` is the teacher-forced
        NLL of its expected continuation after the prompt. ``think``
        (:class:`ctxbench.model.thinking.Thinking`): each answer thinks up to its budget, the
        end-of-think token put in where the budget runs out (``Answer.forced``), then answers with
        up to ``max_new_tokens``; ``Answer.tokens`` holds all new tokens, reasoning included (the
        caller strips it, :func:`ctxbench.model.thinking.split`)."""

    def scores(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], share: bool = True) -> Iterator[Scored]:
        """Teacher-forced NLL of ``continuations[i]`` after ``prompts[i]``
        (:class:`ctxbench.model.decoding.Scored`, any order). No decoding."""

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """(1, n, hidden) final hidden states of ``ids`` (a (n,) tensor): what the proxy metrics read
        (LongPPL's key tokens, the KL to the unscaled model). A backend that returns none refuses
        those metrics before the plan (``check``)."""

    def nll_from_hidden(self, hidden: torch.Tensor, ids: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        """(n - 1,) NLL of tokens 1..n-1 from the final hidden states (the head in chunks)."""

    def kl_from_hidden(self, reference: torch.Tensor, hidden: torch.Tensor, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position KL(reference || this) of the next-token distributions from two models'
        final hidden states, and whether the greedy tokens agree (:func:`ctxbench.model.scoring.kl_from_hidden`)."""


class BackendModule(Protocol):
    """What a backend module (``ctxbench.backends.<name>``) exposes, and nothing else."""

    NAME: str

    def check(self, methods: Sequence[MethodSetting], metrics: Sequence[str], config: ModelOptions) -> None:
        """Before anything loads: refuse in one line what this backend cannot run (a method, a
        metric, a model option, tensor parallelism, the engine not installed)."""

    def load(self, config: ModelOptions) -> Engine:
        """The model on this engine (``config``: :class:`ctxbench.runner.grid.ModelConfig`)."""


class ModelOptions(Protocol):
    """What a backend reads of how to load the model: :class:`ctxbench.runner.grid.ModelConfig`
    (a layer above, so named here by what it has)."""

    @property
    def model(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def attn(self) -> str | None: ...
    @property
    def trust_remote_code(self) -> bool: ...
    @property
    def device_map(self) -> str | None: ...
    @property
    def quantization(self) -> str | None: ...
    @property
    def tensor_parallel(self) -> int: ...


class Engine(ABC):
    """A loaded model on one engine: its description (what every row's provenance says) and what
    the runner and tasks may ask of it. Subclasses are dataclasses that set the description."""

    tokenizer: Any
    geometry: Any  # ctxbench.model.geometry.RopeGeometry
    name: str  # what the user asked for
    digest: str  # weights hash (local) or hub revision
    device: str
    dtype: str
    dtype_note: str  # with --dtype auto: why this dtype

    @abstractmethod
    def identity(self) -> str:
        """The ``backend`` column: ``hf`` for transformers (its version is provenance, as before),
        ``<engine> <version>`` for an engine (a cell of vLLM 0.32 is not a cell of 0.33)."""

    @abstractmethod
    def session(self, method: MethodSetting, factor: float, seq_len: int) -> AbstractContextManager[Session]:
        """``method`` at ``factor`` applied for sequences of up to ``seq_len`` tokens."""

    @abstractmethod
    def size(self) -> ModelSize:
        """:class:`ctxbench.model.size.ModelSize` of the loaded model, for the plan."""

    def num_layers(self) -> int | None:
        """Decoder layers (a per-layer method's parameters are checked against them); None: unknown."""
        return None

    # jobs, contexts and cells are the runner's (ctxbench.runner.grid.Job, the tasks' contexts and
    # cells): a layer above, so Any here
    def check_layouts(self, jobs: Sequence[Any]) -> None:
        """Before the plan: refuse a method whose frequencies do not fit the model's rotary tables."""
        return None

    def check_cells(self, jobs: Sequence[Any], contexts: Sequence[Any]) -> None:
        """Before the plan: refuse a cell the engine cannot compute (past an engine's rotary table)."""
        return None

    def own_attention(self) -> str:
        """The attention implementation the model runs where ctxbench's own attention does not
        (empty: the engine picks its own kernel, ctxbench's attention never runs on it)."""
        return ""

    def reserve(self, longest: int) -> None:
        """The longest sequence the run will ask for (an engine is started for it); in-process: nothing."""
        return None

    def engine_starts(self, cells: Sequence[Any]) -> int:
        """How many engines these cells start (0: none, the model is in-process)."""
        return 0

    def start_seconds(self) -> list[float]:
        """Seconds of each engine start so far."""
        return []

    def calibration(self) -> tuple[str, Timed] | None:
        """``(device type, timed)``: ``timed(lengths, steps)`` yields ``(n, seconds of a forward of n
        tokens, seconds of steps decoding steps on its cache)`` for the plan's rates
        (:func:`ctxbench.runner.costmodel.measured_rate`); None where the engine cannot time its own
        forwards (the plan keeps the assumed rate for the device)."""
        return None

    @contextlib.contextmanager
    def watch(self, advance: Callable[[float], None]) -> Iterator[bool]:
        """A context in which ``advance(tokens)`` is called as forwards progress; yields whether it
        will be (else the progress bar moves a cell's share at each cell)."""
        yield False

    def close(self) -> None:
        """Shut down what the run started (an engine's reserved memory); in-process: nothing, the
        model stays loaded for the caller (the Python API reuses it)."""
        return None
