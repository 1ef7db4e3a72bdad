"""A method is one object: its registry entry (``ctxbench/methods.py``) carries its frequency
function or attention plan, its parameters and derived defaults, its applicability checks and its
engine exports, and no other module tells methods apart by name.

* The scan: no module of ``ctxbench`` but ``methods.py`` uses a registered method name or alias as a
  dispatch key (compared with ``==``/``in``, a dict key, a subscript, a ``case``, or a module-level
  table of names).
* A method added at run time — one new entry, nothing else — runs, resolves, patches a model and
  exports: the attention path, patching and export asked the entry, not a list of names.
* The registry's views (``SUPPORTED``, ``WHY``, ``TWO_BRANCH``, ``BASELINES``) are what the entries say.
* ``docs/design.md`` shows a real entry.
"""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest
import torch
from helpers import ROOT

from ctxbench import methods
from ctxbench.errors import UserError
from ctxbench.methods import (
    ALIASES,
    METHODS,
    Exports,
    Method,
    Param,
    effective_params,
    numpy_namespace,
    resolve,
)
from ctxbench.methods import export as export_module
from ctxbench.methods.export import SUPPORTED, WHY, export, export_settings
from ctxbench.model.geometry import RopeGeometry

ROOT = ROOT
PACKAGE = ROOT / "ctxbench"
# The registry and the modules that define its entries (the package ``ctxbench.methods`` minus what applies them).
REGISTRY_MODULES = tuple(PACKAGE / "methods" / f"{m}.py" for m in ("params", "frequencies", "branches", "native", "engines", "registry", "setting"))
# Modules that read transformers' own vocabulary, whose rope types share names with ctxbench's
# methods without being them: configcheck checks a config.json's "rope_type" against the types
# transformers computes (and their required keys), never to pick a ctxbench method. The llama.cpp
# backend maps llama.cpp's own --rope-scaling names (none, linear, yarn) to its enum values.
VOCABULARY_MODULES = (PACKAGE / "model" / "configcheck.py", PACKAGE / "backends" / "llamacpp.py")
NAMES = frozenset(METHODS) | frozenset(ALIASES)
GEOM = dict(head_dim=16, base=10000.0, trained_len=64)


# --- the scan -----------------------------------------------------------------------------------


def _names_in(node: ast.AST) -> list[str]:
    """Method names a key expression holds: a string constant, or the strings of a tuple/list/set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for elt in node.elts for n in _names_in(elt)]
    return []


def _tables(value: ast.AST) -> list[ast.AST]:
    """Collections of names inside a module-level value: ``X = ("none", "native")``, ``{"e": ("a", "b")}``."""
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return [value]
    if isinstance(value, ast.Dict):
        return [t for v in value.values for t in _tables(v)]
    return []


def dispatch_keys(source: str) -> list[tuple[int, str, str]]:
    """``(line, name, how)`` for each method name the source uses as a dispatch key."""
    tree = ast.parse(source)
    found: list[tuple[int, str, str]] = []

    def add(node: ast.AST, key: ast.AST, how: str) -> None:
        found.extend((node.lineno, name, how) for name in _names_in(key))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                add(node, operand, "compared")
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    add(key, key, "dict key")
        elif isinstance(node, ast.Subscript):
            add(node, node.slice, "subscript")
        elif isinstance(node, ast.MatchValue):
            add(node, node.value, "case")
    for node in tree.body:  # a table of names kept outside the registry
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for table in _tables(node.value):
                if len(_names_in(table)) >= 2:
                    found.append((table.lineno, ", ".join(_names_in(table)), "table of names"))
    return sorted(set(found))


def test_no_module_but_the_registry_dispatches_on_a_method_name():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: '{name}' used as a {how}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in REGISTRY_MODULES and path not in VOCABULARY_MODULES
        for line, name, how in dispatch_keys(path.read_text())
    ]
    assert not offenders, "ask the method's registry entry instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize("snippet,count", [
    ('if name == "yarn": pass', 1),
    ('if name in ("rerope", "leaky-rerope"): pass', 2),
    ('WHY = {("vllm", "dynamic-ntk"): "why"}', 1),
    ('x = WHY[("vllm", "pi")]', 1),
    ('SUPPORTED = {"vllm": ("none", "linear")}', 1),
    ('match name:\n    case "self-extend": pass', 1),
    ('setting = resolve("none")', 0),  # using a method is not dispatching on one
    ('def run(method="none"): pass', 0),
    ('x = {"--rope-scaling": "none"}', 0),
    ('loss = F.cross_entropy(a, b, reduction="none")', 0),
])  # fmt: skip
def test_the_scan_finds_names_used_as_keys_and_only_those(snippet, count):
    assert len(dispatch_keys(snippet)) == count, dispatch_keys(snippet)


# --- every entry carries its method -------------------------------------------------------------


def test_each_entry_is_complete():
    for name, m in METHODS.items():
        assert m.name == name
        assert (m.fn is None) == m.attention, name  # a frequency function, or attention-level
        if m.attention:  # the log-n family, two branches, a partition of its own (dca), or per-head ratios
            assert [m.query_scale is not None, m.far is not None, m.branches is not None,
                    m.head_ratios is not None].count(True) == 1, name
            assert (m.head_ratios is None) == (m.order_heads is None), name
        if m.far is not None:  # the near branch's w, derived when auto
            assert "window" in m.params and m.derive is not None, name
        for engine in ("transformers", "vllm", "llamacpp"):
            how = getattr(m.exports, engine)
            assert callable(how) or isinstance(how, str), (name, engine)
        # vLLM reads transformers' fields, or where transformers cannot, the fields of a rope type
        # only vLLM has (``Exports.fields``): it can take only what one of them gives
        # (an attention-level method vLLM runs itself, dca, gives its own config instead)
        assert m.exports.refusal("vllm") is not None or m.exports.refusal("transformers") is None \
            or callable(m.exports.fields) or m.attention, name
        if m.exports.fields is not None:  # only for what transformers refuses and vLLM takes
            assert m.exports.refusal("transformers") is not None and m.exports.refusal("vllm") is None, name


def test_the_registry_views_are_what_the_entries_say():
    for engine in ("transformers", "vllm", "llamacpp"):
        assert SUPPORTED[engine] == tuple(
            n for n, m in METHODS.items() if callable(getattr(m.exports, engine))
        )
    assert SUPPORTED["json"] == ("every method",)
    assert WHY == {(e, n): getattr(m.exports, e) for n, m in METHODS.items() for e in ("transformers", "vllm", "llamacpp")
                   if isinstance(getattr(m.exports, e), str) and getattr(m.exports, e)}  # fmt: skip
    assert methods.TWO_BRANCH == ("rerope", "leaky-rerope", "self-extend", "string")
    assert methods.BASELINES == ("none", "native")


FAR_CASES = [
    ("rerope", {"window": 8}),
    ("leaky-rerope", {"window": 8, "k": 3.0}),
    ("self-extend", {"window": 8, "group": 3}),
    ("string", {"window": 8, "local_value": 3}),
]


@pytest.mark.parametrize("spec,params", FAR_CASES)
def test_far_positions_are_the_readme_formulas(spec, params):
    """Each far pair's relative position, from the entry's ``far`` in NumPy: the angle of pair ``t`` is
    ``theta'_t (q - k)``, so the position the model sees is ``(q - k) * theta'_t / theta_t``."""
    xp = numpy_namespace()
    n, w = 64, params["window"]
    setting = resolve(spec, params)
    inv = np.array([1.0, 0.5, 0.01], dtype=np.float32)
    _, far_branch = methods.attention_branches(setting, setting.param_dict, xp=xp)  # near, far
    q, k, far_inv = far_branch.positions(np.arange(n), np.arange(n), inv)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    far = i - j >= w
    seen = (np.asarray(q, dtype=np.float64)[:, None] - np.asarray(k, dtype=np.float64)[None, :]) * (
        far_inv[0] / inv[0]
    )
    p = (i - j).astype(np.float64)
    want = {"rerope": np.full_like(p, w), "leaky-rerope": w + (p - w) / params.get("k", 1),
            "self-extend": (i // params.get("group", 1) + w - w // params.get("group", 1)) - j // params.get("group", 1),
            "string": p - w + params.get("local_value", 0)}[spec]  # fmt: skip
    np.testing.assert_allclose(seen[far], want[far], rtol=1e-6)


# --- a method added as one entry runs everywhere ----------------------------------------------------


def _stretch_far(q_pos, k_pos, inv_freq, *, xp, window):
    """Far pairs at ``w + (p - w)/2``: the query at ``i/2 + w/2``, the key at ``j/2``."""
    return xp.astype(q_pos, xp.float64) / 2 + window / 2, xp.astype(k_pos, xp.float64) / 2, inv_freq


def _stretch_params(params, geom, factor):
    return {**params, "window": geom.trained_len // 4 if params["window"] is None else params["window"]}


def _double_base(params, geom, factor):
    return 2 * geom.base


def _double_base_freqs(geom, factor, seq_len, *, xp):
    return 1.0 / (
        (2 * geom.base) ** (xp.astype(xp.arange(0, geom.rotary_dim, 2), xp.float32) / geom.rotary_dim)
    ), 1.0


STRETCH = Method(
    "stretch",
    None,
    "p -> p if p < w else w + (p-w)/2",
    "a test's two-branch method",
    declared=(Param("window", None, "length", "near keys; auto: L/4", low=1, example=16),),
    uses_factor=False,
    attention=True,
    far=_stretch_far,
    derive=_stretch_params,
    exports=Exports.refused("it is a test's attention method"),
)
DOUBLE_BASE = Method(
    "double-base",
    _double_base_freqs,
    "base 2b",
    "a test's frequency method",
    uses_factor=False,
    exports=Exports(
        methods.rebased(_double_base).transformers,
        "a test's reason vLLM has not",
        methods.rebased(_double_base).llamacpp,
    ),
)


@pytest.fixture
def added(monkeypatch):
    """Two methods added the way a contributor adds one: an entry in the registry, nothing else."""
    monkeypatch.setitem(METHODS, "stretch", STRETCH)
    monkeypatch.setitem(METHODS, "double-base", DOUBLE_BASE)


@pytest.mark.usefixtures("added", "one_thread")
def test_a_two_branch_method_added_as_one_entry_patches_a_model_with_its_own_positions():
    from test_patching import N, assert_close, llama, logits, patched_logits, reference_logits

    setting = resolve("stretch+logn")
    assert setting.two_branch and setting.name == "stretch+logn"
    geom = RopeGeometry(16, 16, 10000.0, 64)
    assert effective_params(resolve("stretch"), geom, 4.0) == {"window": 16}
    ids = torch.randint(0, 258, (1, N), generator=torch.Generator().manual_seed(2))
    model = llama()
    want = reference_logits(model, ids, "leaky-rerope", "none", 16, 2.0)  # the same positions, k = 2
    assert_close(patched_logits(model, "stretch", ids, params={"window": 16}), want)
    assert (want - logits(model, ids)).abs().max() > 1e-2


@pytest.mark.usefixtures("added")
def test_a_method_added_as_one_entry_exports_and_is_refused_with_its_own_reasons():
    v5 = export_settings("double-base", 1, "transformers", **GEOM)["transformers>=5"]
    assert v5 == {"rope_parameters": {"rope_theta": 20000.0, "rope_type": "default"}}
    assert (
        export("double-base", 1, "llamacpp", **GEOM)
        == "--rope-scaling none --rope-freq-base 20000 --ctx-size 64"
    )
    with pytest.raises(
        UserError, match="vllm cannot express method 'double-base': a test's reason vLLM has not"
    ) as info:
        export("double-base", 1, "vllm", **GEOM)
    assert "double-base" not in info.value.fix  # the views are built from the registry when asked
    assert "double-base" in export_module.SUPPORTED["transformers"]
    assert export_module.WHY[("vllm", "double-base")] == "a test's reason vLLM has not"
    with pytest.raises(
        UserError, match="cannot express method 'double-base\\+stretch': it is a test's attention method"
    ):
        export("double-base+stretch", 1, "transformers", **GEOM)


# --- the design doc shows a real entry --------------------------------------------------------------


def test_the_design_docs_worked_example_is_the_registry_entry():
    text = (ROOT / "docs/design.md").read_text()
    section = text[text.index("## How a method plugs in") :]
    section = section[: section.index("\n## ", 3)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    source = "\n".join(p.read_text() for p in REGISTRY_MODULES)
    squash = lambda t: re.sub(r"\s+", " ", t).strip()  # noqa: E731
    entry = next(b for b in blocks if '"ntk-alpha": Method(' in b)
    assert squash(entry) in squash(source)  # the entry as it is, word for word
    for block in blocks:  # and the functions it names, by their signatures
        for signature in re.findall(r"^def \w+\(.*?\)(?: -> [^\n]*)?:$", block, flags=re.M | re.S):
            assert squash(signature) in squash(source), signature
        for line in block.splitlines():
            if line.strip().startswith("return "):
                assert line.strip() in source, line
