"""``ctxbench report FILES --html OUT.html``: one self-contained page to look at results down to
their samples, opened from disk in any browser (no server, no network, nothing from a CDN).

The page is a view, not a computation: its numbers are the ones ``report --format json`` prints
(:func:`ctxbench.report.formats.to_json` of the same pivots, embedded verbatim under ``report``),
each cell's paired verdict is the one ``report --baseline B --format json`` gives
(:func:`ctxbench.report.paired.compare_labels`, Holm-adjusted over the cells shown), and two files
are compared by the gate itself (:func:`ctxbench.report.compare.compare`, and
:func:`ctxbench.report.parity.parity` where the files ran on different backends). Everything the
page shows is one JSON object in a ``<script type="application/json">`` block, which the page's
script (``assets/report.js``, vanilla, shipped as package data) draws; a test reads that block back
and holds it to the JSON report.

Samples stay small: prompts are not stored. Each trial carries what regenerates its prompt (task,
variant, length, depth, seed, the data digest) and its row id (:mod:`ctxbench.results.rowid`), for
``ctxbench show-prompt ROW-ID`` where its task can rebuild prompts (``Task.prompt``).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import stat
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ctxbench.backends import DEFAULT as DEFAULT_BACKEND
from ctxbench.errors import UserError
from ctxbench.methods import resolve
from ctxbench.outfiles import replace_atomically
from ctxbench.parsing import expand_path, len_label
from ctxbench.report.formats import pivots, to_json
from ctxbench.synthetic.metrics import METRICS, score
from ctxbench.textsafe import html_text
from ctxbench.version import __version__

SCHEMA = 1
# The data block is JSON inside <script>: these characters, escaped as JSON allows, can neither end
# the block (``</script>``) nor open a comment or markup the HTML parser acts on.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}
# compare's statuses and parity's verdicts, the cells that changed first
_ORDER = {"worse": 0, "failed": 1, "differs": 1, "missing": 2, "changed": 3, "better": 4, "new": 5, "unpaired": 6, "ok": 7, "same": 7}


def _is_trial(r: dict) -> bool:
    return r.get("trial", "") not in ("", "all")


def _is_doc(r: dict) -> bool:
    return r.get("doc", "") not in ("", "all")


def _float(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _json_obj(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def check_output(path: str, inputs: Sequence[str] = ()) -> None:
    """Refuse an ``--html`` path that cannot be written, before anything is computed: a folder, a
    missing or read-only folder, something that is not a regular file, one of the results files
    being read (the page would replace it)."""
    target = expand_path(path)
    if target.is_dir():
        raise UserError(f"--html '{path}' is a folder", "give a file path such as report.html")
    for source in inputs:
        if target.exists() and os.path.samefile(target, expand_path(source)):
            raise UserError(f"--html '{path}' is the results file '{source}' being reported", "give the page a name of its own, such as report.html")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"cannot write --html '{path}': the folder '{parent}' does not exist", f"create it first (mkdir -p {parent}) or choose another path")
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise UserError(f"--html '{path}' is not a regular file", "give a file path such as report.html")
    if not os.access(parent, os.W_OK) or (mode is not None and not os.access(target, os.W_OK)):
        raise UserError(f"cannot write --html '{path}': permission denied", "choose a writable path")


def write(path: str, page: str) -> None:
    """``page`` to ``path`` whole or not at all (:func:`ctxbench.outfiles.replace_atomically`): a
    failed write leaves no half-written page and the old file, if any, untouched."""
    replace_atomically(expand_path(path), page.encode("utf-8"))


def render(data: dict) -> str:
    """The page: the template with the CSS, the script and ``data`` inlined."""
    assets = resources.files("ctxbench.report") / "assets"
    template = (assets / "report.html").read_text(encoding="utf-8")
    blob = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).translate(_SCRIPT_SAFE)

    return (template.replace("/*CSS*/", (assets / "report.css").read_text(encoding="utf-8"))
            .replace("/*JS*/", (assets / "report.js").read_text(encoding="utf-8"))
            .replace("__TITLE__", html_text(data.get("title", "ctxbench report")))
            .replace("__DATA__", blob))  # fmt: skip


def embedded(page: str) -> dict:
    """The data block of a page :func:`render` wrote (tests and tools read the numbers back)."""
    start = page.index('<script type="application/json" id="ctxbench-data">') + len('<script type="application/json" id="ctxbench-data">')
    return json.loads(page[start : page.index("</script>", start)])


# --------------------------------------------------------------------------------------- samples


def _found(r: dict, extra: dict, expected: list[str]) -> list[bool] | None:
    """Which expected strings the task's scorer finds in the answer, each alone: RULER's metrics
    (``extra.metric``) by name; otherwise only a single expected value, read off the row's score."""
    metric = extra.get("metric")
    answer = r.get("answer", "")
    if metric in METRICS:
        return [score(metric, answer, [e]) >= 1.0 for e in expected]
    value = _float(r.get("value"))
    if len(expected) == 1 and value is not None:
        return [value >= 1.0]
    return None


def _trial(r: dict, ids: dict, rebuildable: set) -> dict:
    extra = _json_obj(r.get("extra", ""))
    expected = extra.get("answers")
    if expected is None and "key" in extra:
        expected = [str(extra["key"])]
    expected = [str(e) for e in expected] if isinstance(expected, list) else []
    depth = r.get("depth", "")
    return dict(
        id=ids.get(id(r)), trial=r.get("trial", ""), depth=_float(depth) if depth != "" else extra.get("needle_depth"),
        needle_pos=extra.get("needle_pos"), expected=expected, answer=r.get("answer", ""), score=_float(r.get("value")),
        metric=r.get("metric", ""), scorer=extra.get("metric", ""), found=_found(r, extra, expected) if expected else None,
        tokens=_float(r.get("tokens")), task=r.get("task", ""), variant=r.get("variant", ""), length=r.get("length", ""),
        seed=r.get("seed", ""), data_digest=r.get("data_digest", ""), dataset=r.get("dataset", ""), run_id=r.get("run_id", ""),
        question=extra.get("question"), rebuild=r.get("task") in rebuildable, answer_nll=extra.get("answer_nll"),
    )  # fmt: skip


def _samples(rows, ids: dict, rebuildable: set) -> dict:
    trials = sorted((r for r in rows if _is_trial(r)), key=lambda r: (_float(r.get("depth")) or 0.0, int(r["trial"]) if r["trial"].isdigit() else 0))
    docs = [dict(doc=r["doc"], metric=r["metric"], value=_float(r.get("value")), tokens=_float(r.get("tokens")), id=ids.get(id(r)))
            for r in rows if _is_doc(r)]  # fmt: skip
    curve = sorted(([_float(r.get("pos_start")), _float(r.get("pos_end")), _float(r.get("value"))] for r in rows
                    if r.get("metric") == "nll_pos" and r.get("pos_start", "") != ""), key=lambda x: x[0] or 0)  # fmt: skip
    out: dict = {"trials": [_trial(r, ids, rebuildable) for r in trials]}
    if docs:
        out["docs"] = docs
    if curve:
        out["curve"] = curve
    return out


# ------------------------------------------------------------------------------------ provenance


def _command(task, rows: list[dict], path: str) -> str | None:
    """The command that reruns one run's cells of one task and method label (as far as rows say)."""
    if task is None:
        return None
    r = rows[0]
    label, method = r.get("label") or r["method"], r["method"]
    # a default label, name(k=v, ...), is a method spec that carries its parameters; another label is the user's own name
    spec = label if label.startswith(method + "(") and label.endswith(")") else method
    args = ["ctxbench", task.name, "--model", r["model"], "--method", spec]
    factors = sorted({_float(x["factor"]) for x in rows if _float(x.get("factor")) is not None})
    if factors:
        args += ["--factor", ",".join(f"{f:g}" for f in factors)]
    args += ["--len", ",".join(len_label(n) for n in sorted({int(float(x["length"])) for x in rows}))]
    names = {o.name: o for o in task.options}
    variants = sorted({x.get("variant", "") for x in rows} - {""})
    if variants and "variants" in names:
        args += [names["variants"].cli_flag, ",".join(variants)]
    depths = sorted({_float(x.get("depth")) for x in rows if x.get("depth", "") != ""})
    if depths and "depths" in names:
        args += [names["depths"].cli_flag, ",".join(f"{d:g}" for d in depths)]
    trials = [int(e["trials"]) for x in rows if not _is_trial(x) for e in [_json_obj(x.get("extra", ""))] if isinstance(e.get("trials"), (int, float))]
    if trials and "trials" in names:
        args += [names["trials"].cli_flag, str(max(trials))]
    for key, value in _json_obj(r.get("options", "")).items():
        option = names.get(key)
        if option is None or value is None or value == [] or value == ():
            continue
        if option.is_flag:
            args.append(option.cli_flag if value else "--no-" + option.cli_flag[2:])
        elif option.repeatable and isinstance(value, list):
            for v in value:
                args += [option.cli_flag, str(v)]
        else:
            args += [option.cli_flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    backend = (r.get("backend") or DEFAULT_BACKEND).split(" ")[0]
    args += ["--seed", r.get("seed") or "0", "--dtype", r.get("dtype") or "auto", "--device", r.get("device") or "auto",
             "--backend", backend, "--out", path]  # fmt: skip
    return shlex.join(args)


def provenance(records_by_file: list[tuple[str, list[dict]]], tasks: dict) -> list[dict]:
    """One entry per (file, run id, task, method label): what ran, on what, and how to run it again."""
    groups: dict[tuple, list[dict]] = {}
    for path, records in records_by_file:
        for r in records:
            groups.setdefault((path, r.get("run_id", ""), r["task"], r.get("label") or r["method"]), []).append(r)
    out = []
    for (path, run, task, label), rows in groups.items():
        r = rows[0]

        def each(col: str, rows=rows) -> list[str]:
            return sorted({x.get(col, "") for x in rows} - {""})

        out.append(dict(
            file=path, run_id=run, task=task, label=label, method=r["method"], model=r["model"], model_digest=each("model_digest"),
            dataset=each("dataset"), data_digest=each("data_digest"), ctxbench_version=each("ctxbench_version"),
            torch_version=each("torch_version"), transformers_version=each("transformers_version"), backend=each("backend") or [DEFAULT_BACKEND],
            dtype=each("dtype"), device=each("device"), method_params=each("method_params"), options=each("options"), seed=each("seed"),
            time=[min(each("time"), default=""), max(each("time"), default="")], rows=len(rows),
            attention_kernel=sorted({str(_json_obj(x.get("extra", "")).get("attention_kernel", "")) for x in rows} - {""}),
            command=_command(tasks.get(task), rows, path),
        ))  # fmt: skip
    return out


# ----------------------------------------------------------------------------------- the report


def _pick_baseline(records: list[dict], ps) -> tuple[str | None, str]:
    """``none`` where the rows hold it, else the method best at the first table's longest length."""
    labels = {r.get("label") or r["method"] for r in records}
    plain = resolve("none").label  # unscaled RoPE, as its rows are labelled
    if plain in labels:
        return plain, f"{plain} (unscaled RoPE), present in these results"
    for p in ps:
        if p.headline and len(p.rows) > 1:
            n = p.lengths[-1]
            scored = [(c.value, label) for label, cells in p.rows.items() for c in [cells.get(n)] if c is not None and not math.isnan(c.value)]
            if scored:
                best = (max if p.higher_is_better else min)(scored)[1]
                return best, f"the best method at {n} tokens in '{p.title}' (no 'none' in these results)"
    return None, ""


def _cell_key(i: int, label: str, n: int) -> str:
    return f"{i}|{label}|{n}"


def build(files: list[str], records_by_file: list[tuple[str, list[dict]]], ids: dict, ps, tasks: dict, *,
          filters: dict, baseline: str | None, threshold: float | None, notes: list[str]) -> dict:  # fmt: skip
    """The page's data: the JSON report of ``ps`` verbatim, and beside it each cell's verdict and
    samples, the provenance, and with two files the comparison."""
    records = [r for _, rs in records_by_file for r in rs]
    report = json.loads(to_json(ps))
    verdicts: dict[str, dict] = {}
    chosen, why = (baseline, "--baseline") if baseline else _pick_baseline(records, ps)
    if chosen:
        try:
            paired = ps if baseline else pivots(records, tasks, baseline=chosen, threshold=threshold, **filters)
        except UserError as exc:
            notes.append(f"no paired verdicts against '{chosen}': {exc.what}")
            paired = []
        for i, p in enumerate(paired):
            for label, cells in p.rows.items():
                for n, c in cells.items():
                    if c.p_holm is not None or label == chosen:
                        verdicts[_cell_key(i, label, n)] = dict(
                            baseline=chosen, delta=c.delta, lo=c.delta_lo, hi=c.delta_hi, p=c.p_value, p_holm=c.p_holm, n=c.paired_n,
                            is_baseline=label == chosen)  # fmt: skip
    rebuildable = {name for name, t in tasks.items() if t.prompt is not None}
    samples = {}
    for i, p in enumerate(ps):
        for label, cells in p.rows.items():
            for n, c in cells.items():
                samples[_cell_key(i, label, n)] = _samples(c.source, ids, rebuildable)
    trained = {i: p.trained_len for i, p in enumerate(ps)}
    data = dict(
        schema=SCHEMA, ctxbench_version=__version__, files=files, title="ctxbench report: " + ", ".join(os.path.basename(f) for f in files),
        report=report, pivots_meta=[dict(headline=p.headline, fraction=p.fraction, trained_len=trained[i]) for i, p in enumerate(ps)],
        baseline=chosen, baseline_why=why, verdicts=verdicts, samples=samples,
        provenance=provenance(records_by_file, tasks), notes=notes, compare=None,
    )  # fmt: skip
    return _finite(data)


def comparison(base: str, new: str, base_records: list[dict], new_records: list[dict], ids: dict) -> dict:
    """``compare BASE NEW`` cell by cell (the cells that changed first), ``compare --across-backends``
    as well where the files ran on different backends, and the trials side by side."""
    from ctxbench.report.compare import compare, pct  # start-up: loads filelock
    from ctxbench.report.compare import fmt as show  # start-up: loads filelock

    changes, notes = compare(base, new)
    rows: list[dict[str, Any]] = [dict(key=c.key, base=c.base, new=c.new, status=c.status, reason=c.reason, change=pct(c),
                 base_text=show(c.base, c.base_ci, c.key["metric"], c.base_all_pass),
                 new_text=show(c.new, c.new_ci, c.key["metric"], c.new_all_pass)) for c in changes]  # fmt: skip
    rows.sort(key=lambda x: _ORDER.get(x["status"], 9))
    out: dict[str, Any] = dict(base=base, new=new, mode="compare", changes=rows, notes=notes, parity=None)
    backends = ({r.get("backend") or DEFAULT_BACKEND for r in base_records}, {r.get("backend") or DEFAULT_BACKEND for r in new_records})
    if backends[0].isdisjoint(backends[1]):
        from ctxbench.report import parity  # start-up: loads filelock

        pairs, pnotes = parity.parity(base, new)
        prow: list[dict[str, Any]] = [dict(task=p.task, label=p.label, factor=p.factor, length=p.length, depth=p.depth, metric=p.metric, base=p.a, new=p.b,
                     status=p.verdict, detail=p.detail, same=p.same, trials=p.trials, same_score=p.same_score) for p in pairs]  # fmt: skip
        prow.sort(key=lambda x: _ORDER.get(x["status"], 9))
        out["parity"] = dict(pairs=prow, notes=pnotes, summary=parity.summary(pairs))
    out["trials"] = _side_by_side(base_records, new_records, ids)
    return _finite(out)


_TRIAL_JOIN = ("model", "task", "variant", "label", "factor", "length", "depth", "seed", "trial", "metric")


def _side_by_side(base_records: list[dict], new_records: list[dict], ids: dict) -> list[dict]:
    """Trials of the same cell and number in both files (backend and dtype aside), answers differing first
    (:func:`ctxbench.report.parity.same_answer`: the same as far as both decoded, as the parity counts them)."""
    from ctxbench.report.parity import same_answer  # start-up: loads filelock

    def key(r):
        return tuple(r.get(c, "") if c != "factor" else f"{_float(r.get('factor')) or 0:g}" for c in _TRIAL_JOIN)

    new_by = {key(r): r for r in new_records if _is_trial(r)}
    out = []
    for b in base_records:
        n = new_by.get(key(b)) if _is_trial(b) else None
        if n is None:
            continue
        out.append(dict(task=b["task"], variant=b.get("variant", ""), label=b.get("label") or b["method"], factor=b.get("factor", ""),
                        length=b["length"], depth=b.get("depth", ""), trial=b["trial"], base_answer=b.get("answer", ""),
                        new_answer=n.get("answer", ""), base_score=_float(b.get("value")), new_score=_float(n.get("value")),
                        differ=not same_answer(b.get("answer", ""), n.get("answer", "")), base_id=ids.get(id(b)), new_id=ids.get(id(n))))  # fmt: skip
    out.sort(key=lambda x: not x["differ"])
    return out


def _finite(data):
    """NaN and infinities as null: the page's JSON is strict, as ``report --format json`` is."""
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def save(out: str, files: list[str], records_by_file: list[tuple[str, list[dict]]], ids: dict, ps, tasks: dict, *,
         filters: dict, baseline: str | None, threshold: float | None, notes: list[str]) -> int:  # fmt: skip
    """Build, render and write the page of ``report FILES --html OUT``; returns its size in bytes."""
    data = build(files, records_by_file, ids, ps, tasks, filters=filters, baseline=baseline, threshold=threshold, notes=notes)
    if len(records_by_file) == 2:
        (base, base_records), (new, new_records) = records_by_file
        data["compare"] = comparison(base, new, base_records, new_records, ids)
    page = render(data)
    write(out, page)
    return len(page.encode("utf-8"))
