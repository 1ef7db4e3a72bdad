"""Every cache ctxbench keeps, poisoned every way a cache goes bad: cut short, overwritten with
garbage, the wrong JSON shape, an older layout or version, a value outside its meaning (a zero,
negative, NaN or infinite rate, a text where a number goes), ids that are not the corpus's, a
digest that does not match, a companion file missing, a directory where a file should be.

Each case asserts what issue 37 asks of a cache: no exception, the bad entry not used (what
ctxbench reads equals a fresh computation without any cache), one line on stderr
(``note: ignored a bad cache entry <path> (<why>); ...``), and the entry rebuilt (the next read is
silent and finds a verified entry). The caches live in a temporary ``CTXBENCH_CACHE``; the models
are the tiny ones, so the whole table runs in seconds."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import byte_tokenizer, save_with_tokenizer, tiny_llama
from safetensors import safe_open
from safetensors.torch import load_file, save

from ctxbench.backends.hf import wrap
from ctxbench.methods.setting import resolve
from ctxbench.model.autodtype import PROBES, cached_probe, device_key, probe, probe_key
from ctxbench.model.cache import MANIFEST, digest, seal_dir
from ctxbench.model.files import DIGESTS, GEOMETRY, file_digest, file_key, load_config, load_geometry
from ctxbench.model.geometry import RopeGeometry
from ctxbench.model.load import MODEL_SCHEMA, _save_dequantised, verified_model
from ctxbench.model.size import SIZES, ModelSize, model_size
from ctxbench.runner.costmodel import (
    DEFAULT_CPU,
    PATH_FACTORS,
    RATES,
    factors_for_plan,
    measured_factor,
    measured_rate,
    rate_for_plan,
)
from ctxbench.tasks.corpus import Tokenized, _corpus

NOTE = "note: ignored a bad cache entry "
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0
GOOD_PROBE = {"tokens": 1024, "float32": 3.1, "bfloat16": 1.0}  # seconds of the probe forward in each dtype
GOOD_RATE = {"linear": 2.5e11, "attention": 1.5e11, "decode_linear": 9e9, "decode_attention": 1.2e10}  # "measured before", default model


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A temporary cache, a tiny model saved to disk, and a three-document corpus."""
    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    model = save_with_tokenizer(tiny_llama(), tmp_path / "tiny-model")
    texts = ["the cat sat on the mat " * 20, "import os\nprint(os.sep)\n" * 15, "lorem ipsum dolor " * 12]
    return {"tmp": tmp_path, "cache": tmp_path / "cache", "model": model,
            "corpus": _corpus("three", ["a.txt", "b.txt", "c.txt"], texts), "tokenizer": byte_tokenizer()}  # fmt: skip


def _note_of(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(NOTE), err  # one line, the note
    return lines[0]


def _silent(capsys) -> None:
    assert capsys.readouterr().err == ""


# --- the keyed JSON caches: digests, geometry, sizes, rates -------------------------------------


@dataclass(frozen=True)
class JsonKind:
    """A keyed JSON cache, how ctxbench reads it, and what that read gives with no cache at all."""

    name: str
    cache: object  # the JsonCache
    key: Callable[[dict], str]
    seed: Callable[[dict], None]  # writes one good entry
    use: Callable[[dict], object]  # ctxbench's read through the cache (rebuilding what it rebuilds)
    fresh: Callable[[dict], object]  # the same answer, computed without any cache
    tweak: Callable[[object], object]  # a different value of the right shape (for a digest mismatch)


def _weights(env) -> Path:
    return env["model"] / "model.safetensors"


def _rate_key(env) -> str:
    return f"{device_key('cpu', 'float32')}|smollm2-135m"


def _plan_rate(env):
    rate, basis, measured = rate_for_plan("cpu", "float32", "smollm2-135m")
    return rate, measured


GOOD_FACTOR = {"factor": 1.3, "length": 4096, "method": "self-extend"}  # "measured before": Self-Extend's attention, 1.3x plain


def _factor_key(env) -> str:
    return f"{device_key('cpu', 'float32')}|smollm2-135m|far"


KINDS = {
    "digests": JsonKind(
        "digests", DIGESTS, lambda env: file_key(_weights(env)), lambda env: file_digest(_weights(env)),
        lambda env: file_digest(_weights(env)),
        lambda env: "sha256:" + hashlib.sha256(_weights(env).read_bytes()).hexdigest()[:16],
        lambda value: "sha256:" + "0" * 16,
    ),
    "geometry": JsonKind(
        "geometry", GEOMETRY, lambda env: file_key(env["model"] / "config.json"),
        lambda env: load_geometry(str(env["model"])), lambda env: load_geometry(str(env["model"])),
        lambda env: RopeGeometry.from_config(load_config(str(env["model"]))),
        lambda value: {**value, "base": value["base"] * 2},
    ),
    "sizes": JsonKind(
        "sizes", SIZES, lambda env: file_key(env["model"] / "config.json"),
        lambda env: model_size(str(env["model"])), lambda env: model_size(str(env["model"])),
        lambda env: ModelSize.from_config(load_config(str(env["model"])), str(env["model"])),
        lambda value: {**value, "layers": value["layers"] + 10},
    ),
    "probes": JsonKind(  # --dtype auto's timing of float32 against bfloat16; a bad entry is probed again
        "probes", PROBES, lambda env: probe_key("smollm2-135m"),
        lambda env: PROBES.lookup(probe_key("smollm2-135m"), lambda: dict(GOOD_PROBE)),
        lambda env: cached_probe("smollm2-135m"), lambda env: None,
        lambda value: {**value, "bfloat16": value["bfloat16"] * 2},
    ),
    "rates": JsonKind(  # read by every plan; a bad entry falls back as if never measured
        "rates", RATES, _rate_key, lambda env: RATES.lookup(_rate_key(env), lambda: dict(GOOD_RATE)),
        _plan_rate, lambda env: (DEFAULT_CPU, False),
        lambda value: {**value, "linear": value["linear"] * 10},
    ),
    "attention costs": JsonKind(  # read by every plan of an attention-level method; a bad entry prices it as plain
        "attention costs", PATH_FACTORS, _factor_key, lambda env: PATH_FACTORS.lookup(_factor_key(env), lambda: dict(GOOD_FACTOR)),
        lambda env: factors_for_plan("cpu", "float32", "smollm2-135m", ["far"]), lambda env: {},
        lambda value: {**value, "factor": value["factor"] * 2},
    ),
}  # fmt: skip


def _data(path: Path) -> dict:
    return json.loads(path.read_text())


def _write(path: Path, data) -> None:
    path.write_text(json.dumps(data))


def _set_value(kind: JsonKind, fn) -> Callable:
    """A poison that replaces the entry's value by ``fn(value)`` and recomputes its digest the way
    ctxbench does, so only the check of what the value means can catch it."""

    def poison(env, path):
        data = _data(path)
        entry = data["entries"][kind.key(env)]
        entry["value"] = fn(entry["value"])
        try:
            entry["sha256"] = digest(json.dumps(entry["value"], sort_keys=True, separators=(",", ":")).encode())
        except ValueError:
            pass
        path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them

    return poison


def _file_poisons(kind: JsonKind) -> dict[str, Callable]:
    def entries(env, path, fn):
        data = _data(path)
        fn(data)
        _write(path, data)

    def as_dir(env, path):
        path.unlink()
        path.mkdir()
        (path / "inside").write_text("x")

    def dangling(env, path):
        path.unlink()
        path.symlink_to(env["tmp"] / "nowhere.json")

    return {
        "truncated": lambda env, path: path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2]),
        "garbage bytes": lambda env, path: path.write_bytes(b"\x00\xff<html>404</html>"),
        "empty file": lambda env, path: path.write_bytes(b""),
        "a JSON list": lambda env, path: path.write_text("[1, 2, 3]"),
        "a JSON number": lambda env, path: path.write_text("42"),
        "the old layout (no schema)": lambda env, path: _write(path, {k: e["value"] for k, e in _data(path)["entries"].items()}),
        "another schema": lambda env, path: entries(env, path, lambda d: d.update(schema="something else")),
        "another version": lambda env, path: entries(env, path, lambda d: d.update(version=99)),
        "entries not a table": lambda env, path: entries(env, path, lambda d: d.update(entries=[1, 2])),
        "an entry without its digest": lambda env, path: entries(
            env, path, lambda d: d["entries"].update({kind.key(env): d["entries"][kind.key(env)]["value"]})),
        "digest mismatch": lambda env, path: entries(
            env, path, lambda d: d["entries"][kind.key(env)].update(value=kind.tweak(d["entries"][kind.key(env)]["value"]))),
        "a directory where the file should be": as_dir,
        "a dangling link": dangling,
        "unreadable": lambda env, path: path.chmod(0),
    }  # fmt: skip


VALUE_POISONS = {
    "probes": {
        "zero seconds": lambda v: {**v, "bfloat16": 0},
        "NaN seconds": lambda v: {**v, "float32": float("nan")},
        "seconds as text": lambda v: {**v, "float32": "slow"},
        "tokens as bool": lambda v: {**v, "tokens": True},
        "no tokens": lambda v: {**v, "tokens": 0},
        "a dtype missing": lambda v: {k: x for k, x in v.items() if k != "bfloat16"},
        "a list": lambda v: [v["float32"], v["bfloat16"]],
    },
    "rates": {
        "zero rate": lambda v: {**v, "linear": 0},
        "negative rate": lambda v: {**v, "decode_linear": -1e9},
        "NaN rate": lambda v: {**v, "attention": float("nan")},
        "infinite rate": lambda v: {**v, "decode_attention": float("inf")},
        "rate as text": lambda v: {**v, "linear": "fast"},
        "rate as bool": lambda v: {**v, "decode_linear": True},
        "rate missing": lambda v: {k: x for k, x in v.items() if k != "attention"},
        "an extra field": lambda v: {**v, "extra": 1.0},
        "a version-3 rate (one per forward, one per step)": lambda v: {"prefill": v["linear"], "decode": v["decode_linear"]},
        "a list": lambda v: [v["linear"], v["decode_linear"]],
        "null": lambda v: None,
    },
    "attention costs": {
        "zero factor": lambda v: {**v, "factor": 0},
        "NaN factor": lambda v: {**v, "factor": float("nan")},
        "a factor of 1000": lambda v: {**v, "factor": 1000.0},
        "factor as text": lambda v: {**v, "factor": "slow"},
        "length as bool": lambda v: {**v, "length": True},
        "no length": lambda v: {**v, "length": 0},
        "method not a label": lambda v: {**v, "method": 3},
        "an extra field": lambda v: {**v, "extra": 1.0},
        "a bare number": lambda v: v["factor"],
    },
    "digests": {
        "not hex": lambda v: "sha256:zzzzzzzzzzzzzzzz",
        "a number": lambda v: 12345,
        "another algorithm": lambda v: "md5:0123456789abcdef",
        "null": lambda v: None,
    },
    "geometry": {
        "head dim as text": lambda v: {**v, "head_dim": "64"},
        "base below 1": lambda v: {**v, "base": 0.5},
        "NaN base": lambda v: {**v, "base": float("nan")},
        "odd rotary dim": lambda v: {**v, "rotary_dim": 7},
        "zero trained length": lambda v: {**v, "trained_len": 0},
        "a field missing": lambda v: {k: x for k, x in v.items() if k != "trained_len"},
        "an unknown field": lambda v: {**v, "window": 3},
    },
    "sizes": {
        "zero layers": lambda v: {**v, "layers": 0},
        "NaN params": lambda v: {**v, "params": float("nan")},
        "negative vocab": lambda v: {**v, "vocab": -1},
        "width as text": lambda v: {**v, "hidden": "576"},
        "an assumed size": lambda v: {**v, "source": "assumed"},
        "a field missing": lambda v: {k: x for k, x in v.items() if k != "vocab"},
    },
}

JSON_CASES = [pytest.param(kind, name, id=f"{kind}: {name}") for kind in KINDS for name in _file_poisons(KINDS[kind])]
JSON_CASES += [pytest.param(kind, name, id=f"{kind}: {name}") for kind, table in VALUE_POISONS.items() for name in table]


@pytest.mark.parametrize("kind_name, poison_name", JSON_CASES)
def test_a_poisoned_json_cache_entry_is_noted_never_used_and_rebuilt(env, kind_name, poison_name, capsys):
    kind = KINDS[kind_name]
    poisons = {**_file_poisons(kind), **{n: _set_value(kind, f) for n, f in VALUE_POISONS.get(kind_name, {}).items()}}
    if poison_name == "unreadable" and ROOT_USER:
        pytest.skip("running as root: a file without permissions is still readable")
    fresh = kind.fresh(env)
    kind.seed(env)
    path = kind.cache.path
    assert kind.cache.get(kind.key(env)) is not None  # a good entry to start from
    capsys.readouterr()
    poisons[poison_name](env, path)

    assert kind.use(env) == fresh  # no exception, and the bad entry is not what was used
    note = _note_of(capsys)
    assert str(path) in note and note.endswith(kind.cache.then)

    assert kind.use(env) == fresh  # the bad entry is gone: a second read is silent
    _silent(capsys)
    if kind_name == "probes":  # read-only before loading; the next load probes again and stores it
        PROBES.lookup(kind.key(env), lambda: probe(tiny_llama(), tokens=32))
    if kind_name == "rates":  # read-only for plans; the next run measures it again and stores it
        rate = measured_rate(wrap(tiny_llama(), env["tokenizer"], name="smollm2-135m"))
        assert _plan_rate(env) == (rate, True)
    if kind_name == "attention costs":  # read-only for plans; the next long run measures it again
        lm = wrap(tiny_llama(), env["tokenizer"], name="smollm2-135m")
        measured_factor(lm, resolve("self-extend"), 2.0, DEFAULT_CPU, length=64)
    assert kind.cache.get(kind.key(env)) is not None and path.is_file()  # rebuilt, and it verifies
    _silent(capsys)


def test_a_bad_entry_costs_only_itself_the_others_are_kept(env, capsys):
    """Two models' rates, one with a zero rate: that one is dropped with a note, the other kept."""
    RATES.lookup("other|model", lambda: dict(GOOD_RATE))
    KINDS["rates"].seed(env)
    _set_value(KINDS["rates"], lambda v: {**v, "linear": 0})(env, RATES.path)
    assert _plan_rate(env) == (DEFAULT_CPU, False)
    assert "[" + _rate_key(env) + "]" in _note_of(capsys)
    assert RATES.get("other|model") == GOOD_RATE
    _silent(capsys)


def test_a_plan_prints_over_a_zero_rate_and_a_wrong_shape(env, capsys):
    """The issue's crash: a zero rate divided every plan by zero (ZeroDivisionError), a list
    broke the lookup (AttributeError), --dry-run included. Now the plan prints its usual line."""
    import io

    from rich.console import Console

    from ctxbench.runner.grid import Job
    from ctxbench.runner.plan import plan_table, print_plan
    from ctxbench.runner.settings import build_settings
    from ctxbench.tasks import get

    job = Job(get("ppl"), build_settings(get("ppl"), "none", 2.0, "1k", {"docs": 1}))
    clean = plan_table([job], "smollm2-135m", device="cpu", dtype="float32")
    capsys.readouterr()
    zero = {"value": {"prefill": 0, "decode": 0}, "sha256": digest(b'{"decode":0,"prefill":0}')}
    zeros = dict.fromkeys(GOOD_RATE, 0)
    zero4 = {"value": zeros, "sha256": digest(json.dumps(zeros, sort_keys=True, separators=(",", ":")).encode())}
    for poison in (json.dumps({"schema": "throughputs", "version": 3, "entries": {_rate_key(env): zero}}),
                   json.dumps({"schema": "throughputs", "version": 4, "entries": {_rate_key(env): zero4}}), "[1, 2]", '{"a": 1}'):
        RATES.path.parent.mkdir(parents=True, exist_ok=True)
        RATES.path.write_text(poison)
        plan = plan_table([job], "smollm2-135m", device="cpu", dtype="float32")
        assert plan.seconds == clean.seconds and plan.basis == clean.basis
        shown = io.StringIO()
        print_plan(Console(file=shown, width=300), plan)
        assert "plan ppl: 1 cell(s)" in shown.getvalue()
        _note_of(capsys)


@pytest.mark.integration
def test_dry_run_over_a_poisoned_rates_file_prints_the_plan_and_one_note(tmp_path):
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "rates.json").write_text('{"cpu": {"prefill": 0, "decode": 0}}')
    env = {**os.environ, "CTXBENCH_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-m", "ctxbench", "ppl", "--dry-run", "--len", "1k", "--out", str(tmp_path / "r.csv")],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "plan ppl: 1 cell(s)" in done.stdout
    assert done.stderr.splitlines() == [f"{NOTE}{cache / 'rates.json'} (no schema stamp: written by an older ctxbench, "
                                        "or not a ctxbench cache); measured again on the next run"]  # fmt: skip
    assert not (cache / "rates.json").exists()  # dropped, not left to be noted again


# --- the token cache ------------------------------------------------------------------------------


def _fresh_ids(env) -> list[list[int]]:
    return [env["tokenizer"](t, return_attention_mask=False)["input_ids"] for t in env["corpus"].texts]


def _tokens(env) -> Tokenized:
    return Tokenized(env["corpus"], env["tokenizer"])


def _stamp(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()["ctxbench"])


def _resave(path: Path, tensors=None, stamp=None, metadata=None) -> None:
    tensors = load_file(path) if tensors is None else tensors
    meta = metadata if metadata is not None else {"ctxbench": json.dumps(stamp if stamp is not None else _stamp(path))}
    path.write_bytes(save(tensors, metadata=meta))


def _edit_tensors(fn):
    def poison(env, path):
        tensors = load_file(path)
        fn(tensors)
        _resave(path, tensors, _stamp(path))  # the digests are kept: only they can tell

    return poison


def _edit_stamp(fn):
    def poison(env, path):
        stamp = _stamp(path)
        fn(stamp)
        _resave(path, stamp=stamp)

    return poison


def _another_corpus(env, path):
    other = _corpus("other", ["x.txt"], ["something else entirely " * 10])
    tokens = Tokenized(other, env["tokenizer"])
    tokens[0]
    tokens.save()
    path.write_bytes(tokens.cache_path.read_bytes())


def _as_dir(env, path):
    path.unlink()
    path.mkdir()


def _swap(t):
    t["doc0"], t["doc1"] = t["doc1"], t["doc0"]


TOKEN_POISONS = {
    "truncated": lambda env, path: path.write_bytes(path.read_bytes()[:-7]),
    "garbage bytes": lambda env, path: path.write_bytes(b"\x00" * 64),
    "empty file": lambda env, path: path.write_bytes(b""),
    "a directory where the file should be": _as_dir,
    "ids of another document (swapped)": _edit_tensors(_swap),
    "ids of the same length, one changed": _edit_tensors(lambda t: t["doc2"].__setitem__(3, (int(t["doc2"][3]) + 1) % 256)),
    "ids cut short": _edit_tensors(lambda t: t.update(doc1=t["doc1"][:-5].clone())),
    "ids outside the vocabulary": _edit_tensors(lambda t: t.update(doc0=t["doc0"] + 10_000)),
    "negative ids": _edit_tensors(lambda t: t.update(doc0=-t["doc0"])),
    "float ids": _edit_tensors(lambda t: t.update(doc1=t["doc1"].float())),
    "int64 ids": _edit_tensors(lambda t: t.update(doc1=t["doc1"].long())),
    "2-D ids": _edit_tensors(lambda t: t.update(doc2=t["doc2"][None, :].clone())),
    "a document the corpus does not have": _edit_tensors(lambda t: t.update(doc99=t["doc0"].clone())),
    "a tensor not named as a document": _edit_tensors(lambda t: t.update(weights=t["doc0"].clone())),
    "a listed document missing": _edit_tensors(lambda t: t.pop("doc1")),
    "no metadata (a plain safetensors file)": lambda env, path: _resave(path, metadata={}),
    "metadata not JSON": lambda env, path: _resave(path, metadata={"ctxbench": "{not json"}),
    "another schema": _edit_stamp(lambda s: s.update(schema="weights")),
    "another version": _edit_stamp(lambda s: s.update(version=1)),
    "written for another tokenizer": _edit_stamp(lambda s: s.update(tokenizer="0" * 16)),
    "no document digests": _edit_stamp(lambda s: s.pop("docs")),
    "a digest replaced": _edit_stamp(lambda s: s["docs"].update(doc0=digest(b"x"))),
    "the file of another corpus": _another_corpus,
    "unreadable": lambda env, path: path.chmod(0),
}


@pytest.mark.parametrize("poison_name", TOKEN_POISONS)
def test_a_poisoned_token_cache_is_noted_never_used_and_rebuilt(env, poison_name, capsys):
    if poison_name == "unreadable" and ROOT_USER:
        pytest.skip("running as root: a file without permissions is still readable")
    fresh = _fresh_ids(env)
    tokens = _tokens(env)
    assert [tokens[i].tolist() for i in range(3)] == fresh
    tokens.save()
    capsys.readouterr()
    TOKEN_POISONS[poison_name](env, tokens.cache_path)

    poisoned = _tokens(env)  # no exception
    assert [poisoned[i].tolist() for i in range(3)] == fresh  # the corpus's ids, never the cache's
    assert str(tokens.cache_path) in _note_of(capsys)
    poisoned.save()
    again = _tokens(env)
    assert sorted(again.ids) == [0, 1, 2] and [again.ids[i].tolist() for i in range(3)] == fresh  # rebuilt
    _silent(capsys)


def test_wrong_token_ids_no_longer_score_as_ok_under_the_corpus_digest(env, capsys, corpus_dir):
    """The issue's silent wrong answer: ppl over a token cache holding another document's ids gave
    other perplexities, recorded as ok under the same data_digest. Now the numbers are a fresh run's."""
    from helpers import run_settings

    from ctxbench.runner.settings import build_settings
    from ctxbench.tasks import get
    from ctxbench.tasks.corpus import load_corpus

    lm = wrap(tiny_llama(), env["tokenizer"], name="tiny-llama", digest="tiny")
    settings = build_settings(get("ppl"), "none", 2.0, "64,128", {"dataset": str(corpus_dir), "docs": "2"})

    def values():
        rows = run_settings(lm, "ppl", settings).records
        return [(r["length"], r["doc"], r["metric"], r["value"], r["status"]) for r in rows if r["metric"] not in ("tokens_per_s", "peak_mem_mb")]

    fresh = values()
    cached = Tokenized(load_corpus(str(corpus_dir)), env["tokenizer"]).cache_path
    _edit_tensors(_swap)(env, cached)
    capsys.readouterr()
    assert values() == fresh
    assert str(cached) in _note_of(capsys)


# --- the dequantised GGUF model cache ---------------------------------------------------------------


def _tied():
    return tiny_llama(tie_word_embeddings=True)


def _entry(env) -> Path:
    target = env["cache"] / "models" / "tiny-0123456789abcdef-float32"
    target.parent.mkdir(parents=True, exist_ok=True)
    _save_dequantised(_tied(), env["tokenizer"], target)
    return target


def _logits(model_dir) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.arange(40)[None] % 258).logits


def _reference_logits() -> torch.Tensor:
    with torch.no_grad():
        return _tied()(torch.arange(40)[None] % 258).logits


def test_the_dequantised_cache_is_a_checkpoint_plain_transformers_reads(env, capsys):
    """Issue 35: the cache held lm_head.weight alone and "architectures": null, so another loader
    (vLLM) read no embedding and decoded token 0 forever. Written with save_pretrained it holds the
    tied embedding and names its architecture; plain transformers gives the model's own logits."""
    target = _entry(env)
    with safe_open(str(target / "model.safetensors"), "pt") as f:
        assert "model.embed_tokens.weight" in set(f.keys())
    assert json.loads((target / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert verified_model(target)
    _silent(capsys)
    assert torch.equal(_logits(target), _reference_logits())


def test_load_uses_a_verified_dequantised_entry(env, capsys):
    """The load path itself: the tiny model sealed into the default model's slot is what
    ``load("smollm2-135m")`` returns, without dequantising the GGUF file."""
    from ctxbench.backends.hf import load_model as load
    from ctxbench.model.files import locate
    from ctxbench.model.load import dequantised_path

    _, path, gguf = locate("smollm2-135m")
    slot = dequantised_path(path / gguf, torch.float32)
    slot.parent.mkdir(parents=True, exist_ok=True)
    _save_dequantised(_tied(), env["tokenizer"], slot)
    lm = load("smollm2-135m", device="cpu", dtype="float32")
    with torch.no_grad():
        assert torch.equal(lm.model(torch.arange(40)[None] % 258).logits, _reference_logits())
    _silent(capsys)


def _v1(env, target):
    """What ctxbench wrote before version 2: safetensors' save_model (lm_head.weight only, the tied
    embedding dropped), "architectures": null, no manifest."""
    from safetensors.torch import save_model

    for p in target.iterdir():
        p.unlink()
    model = _tied()
    config = model.config.to_dict()
    config["architectures"] = None
    (target / "config.json").write_text(json.dumps(config))
    save_model(model, str(target / "model.safetensors"))
    env["tokenizer"].save_pretrained(target)


def _manifest(fn):
    def poison(env, target):
        data = json.loads((target / MANIFEST).read_text())
        fn(data)
        (target / MANIFEST).write_text(json.dumps(data))

    return poison


def _resealed(fn):
    """Change a file and seal the directory again: only the checks beyond the digests can tell."""

    def poison(env, target):
        fn(target)
        seal_dir(target, MODEL_SCHEMA)

    return poison


def _flip_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[-1000] ^= 0x01
    file.write_bytes(bytes(data))


def _as_file(env, target):
    import shutil

    shutil.rmtree(target)
    target.write_text("not a directory")


MODEL_POISONS = {
    "the version-1 layout (no manifest, no embedding, no architecture)": _v1,
    "manifest missing": lambda env, target: (target / MANIFEST).unlink(),
    "manifest of version 1": _manifest(lambda d: d.update(version=1)),
    "manifest of another schema": _manifest(lambda d: d.update(schema="corpus tokens")),
    "manifest not JSON": lambda env, target: (target / MANIFEST).write_text("{"),
    "manifest a directory": lambda env, target: ((target / MANIFEST).unlink(), (target / MANIFEST).mkdir()),
    "manifest lists no files": _manifest(lambda d: d.update(files={})),
    "manifest entry malformed": _manifest(lambda d: d["files"].update({"config.json": "abc"})),
    "manifest names a path outside": _manifest(lambda d: d["files"].update({"../x": {"bytes": 1, "sha256": "0"}})),
    "weights truncated": lambda env, target: (target / "model.safetensors").write_bytes((target / "model.safetensors").read_bytes()[:-4096]),
    "a weight byte flipped": lambda env, target: _flip_byte(target / "model.safetensors"),
    "weights missing": lambda env, target: (target / "model.safetensors").unlink(),
    "config.json missing": lambda env, target: (target / "config.json").unlink(),
    "config.json edited": lambda env, target: (target / "config.json").write_text((target / "config.json").read_text().replace("64", "65", 1)),
    "tokenizer.json replaced": lambda env, target: (target / "tokenizer.json").write_text("{}"),
    "a directory where the weights should be": lambda env, target: ((target / "model.safetensors").unlink(), (target / "model.safetensors").mkdir()),
    "a file where the entry should be": _as_file,
    "resealed without an architecture": _resealed(lambda t: (t / "config.json").write_text(
        json.dumps({**json.loads((t / "config.json").read_text()), "architectures": None}))),
    "manifest without its weights listed": _manifest(lambda d: d["files"].pop("model.safetensors")),
    "resealed without config.json": _resealed(lambda t: (t / "config.json").unlink()),
}  # fmt: skip


@pytest.mark.parametrize("poison_name", MODEL_POISONS)
def test_a_poisoned_dequantised_model_is_noted_removed_and_rebuilt(env, poison_name, capsys):
    target = _entry(env)
    capsys.readouterr()
    MODEL_POISONS[poison_name](env, target)
    assert not verified_model(target)  # no exception, and not used
    assert str(target) in _note_of(capsys) and not target.exists()  # noted, and removed
    _save_dequantised(_tied(), env["tokenizer"], target)  # what load() does next, from the GGUF file
    assert verified_model(target)  # rebuilt, and it verifies silently
    _silent(capsys)
    assert torch.equal(_logits(target), _reference_logits())


@pytest.mark.slow
def test_the_default_models_cache_loads_in_plain_transformers_with_ctxbenchs_logits(real_lm, tmp_path, monkeypatch, capsys):
    """The default model's dequantised cache, first written by an older ctxbench (lm_head only,
    "architectures": null, no manifest): load() notes it, dequantises again, and writes a
    checkpoint that AutoModelForCausalLM.from_pretrained reads with the logits ctxbench computes."""
    from transformers import AutoModelForCausalLM

    from ctxbench.backends.hf import load_model as load
    from ctxbench.model.files import locate
    from ctxbench.model.load import dequantised_path

    monkeypatch.setenv("CTXBENCH_CACHE", str(tmp_path / "cache"))
    _, path, gguf = locate("smollm2-135m")
    slot = dequantised_path(path / gguf, torch.float32)
    slot.mkdir(parents=True)
    from safetensors.torch import save_model

    config = real_lm.model.config.to_dict()
    config["architectures"] = None
    (slot / "config.json").write_text(json.dumps(config))
    save_model(real_lm.model, str(slot / "model.safetensors"))
    real_lm.tokenizer.save_pretrained(slot)
    capsys.readouterr()

    lm = load("smollm2-135m", device="cpu", dtype="float32")
    assert str(slot) in _note_of(capsys)
    assert verified_model(slot)
    with safe_open(str(slot / "model.safetensors"), "pt") as f:
        assert "model.embed_tokens.weight" in set(f.keys())
    assert json.loads((slot / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    plain = AutoModelForCausalLM.from_pretrained(str(slot), dtype=torch.float32).eval()
    ids = torch.randint(0, 49152, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = real_lm.model(ids).logits
        assert torch.equal(lm.model(ids).logits, expected)
        assert torch.equal(plain(ids).logits, expected)
    again = load("smollm2-135m", device="cpu", dtype="float32")  # the rebuilt entry, verified and used
    with torch.no_grad():
        assert torch.equal(again.model(ids).logits, expected)
    _silent(capsys)
