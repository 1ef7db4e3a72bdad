"""ctxbench's RULER prompts side by side with RULER's own generators (same tokenizer, same lengths).

For each of the 11 synthetic configs (niah_single_1 .. fwe) and each length, this runs NVIDIA/RULER's
``scripts/data/synthetic/<task>.py`` exactly as its ``scripts/data/prepare.py`` invokes it (the
``base`` model template, so no chat wrapping; the answer prefix appended to the template;
``tokens_to_generate`` from ``constants.py``; the ``synthetic.yaml`` arguments; seed 42), in a
temporary copy of the checkout, reads the jsonl it writes, and builds ctxbench's prompts for the
same config and length (``protocol="ruler"``, ``chat=False``) with the same tokenizer. It reports,
per config and length, the prompt token counts, the generation budget, whether prompt + budget fits
the length, the haystack units used, and whether the fixed text (text before the context, question,
answer prefix, needle / chain-line / list-entry formats) is the same once random values are masked.

Token counting: RULER counts ``len(tokenizer.tokenize(input_text))`` (its ``HFTokenizer``) where
``input_text`` is the whole prompt, answer prefix included, and adds ``tokens_to_generate``;
``tokenize`` adds no special tokens. Both sides are counted that way here (ctxbench's decoded
prompt re-tokenised whole), and ctxbench's own count (``len(ids)``: what the model is fed, its pieces
tokenised separately, BOS included when the tokenizer adds one) is shown beside it.

Offline: RULER's essay haystack (``json/PaulGrahamEssays.json``) is written from ctxbench's
haystack (default: the pydoc prose), so both sides read the same essay; RULER's python
dependencies nltk and tenacity must be importable (``--pythonpath`` adds a directory, e.g. one made
by ``pip install --target DIR nltk tenacity joblib click regex``); when nltk's punkt data is not
installed, ``sent_tokenize`` is patched in the temporary copy only to nltk's untrained
``PunktSentenceTokenizer`` (it only moves essay needles between sentence boundaries; no token count
changes), and the report says so.

    python scripts/ruler_side_by_side.py --ruler /path/to/RULER [--lengths 1500,3000,4096,6000]
        [--samples 5] [--out results/ruler-side-by-side.md] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# (ctxbench task, variant) in RULER's synthetic.yaml order; the RULER config name is ruler_name().
CONFIGS = [("niah", v) for v in ("single_1", "single_2", "single_3", "multikey_1", "multikey_2", "multikey_3", "multivalue", "multiquery")]
CONFIGS += [("vt", None), ("cwe", None), ("fwe", None)]
# ctxbench task -> RULER generator (synthetic.yaml's ``task``, the key of constants.TASKS)
RULER_TASK = {"niah": "niah", "vt": "variable_tracking", "cwe": "common_words_extraction", "fwe": "freq_words_extraction"}
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DEFAULT_LENGTHS = "1500,3000,4096,6000"
RULER_SEED = 42  # prepare.py: --random_seed 42 (+ chunk_idx 0)
PUNKT_PATCH = (
    "from nltk.tokenize import sent_tokenize as _nltk_sent_tokenize  # ruler_side_by_side: offline patch\n"
    "def sent_tokenize(text):\n"
    "    try:\n"
    "        return _nltk_sent_tokenize(text)\n"
    "    except LookupError:  # no punkt data offline: nltk's untrained Punkt\n"
    "        from nltk.tokenize.punkt import PunktSentenceTokenizer\n"
    "        return PunktSentenceTokenizer().tokenize(text)\n"
)


class Usage(Exception):
    """A one-line usage error (exit status 2)."""


def ruler_name(task: str, variant: str | None) -> str:
    return f"niah_{variant}" if task == "niah" else task


# ---------------------------------------------------------------------------------------------
# Pure parts: splitting a prompt into (text before the context, context, question, answer prefix)
# and masking the random values so templates can be compared.


@dataclass(frozen=True)
class Parts:
    pre: str
    context: str
    question: str
    prefix: str


def anchors(entry: dict) -> tuple[str, str]:
    """(context start, question start) of a RULER ``constants.TASKS`` entry, from its template:
    the text between the last placeholder before ``{context}`` and ``{context}`` (the context
    begins right after it), and the template after ``{context}`` up to its first space (the
    question begins there: "\\nWhat", "\\nQuestion:")."""
    before, after = entry["template"].split("{context}")
    start = before[before.rfind("}") + 1 :]
    if not start or not after or " " not in after:
        raise ValueError(f"cannot anchor the template {entry['template']!r}")
    return start, after[: after.index(" ")]


def split_prompt(text: str, entry: dict) -> Parts:
    """A whole prompt (answer prefix included) cut as RULER cuts its records: the answer prefix
    at the last occurrence of the first 10 characters of ``entry["answer_prefix"]`` (RULER's
    ``input_text.rfind(answer_prefix[:10])``); the question at the last question anchor before
    it; the context after the last context anchor before the question."""
    ctx_start, q_start = anchors(entry)
    cut = text.rfind(entry["answer_prefix"][:10])
    if cut < 0:
        raise ValueError("no answer prefix in the prompt")
    body, prefix = text[:cut], text[cut:]
    q = body.rfind(q_start)
    if q < 0:
        raise ValueError(f"no question ({q_start!r}) in the prompt")
    c = body.rfind(ctx_start, 0, q)
    if c < 0:
        raise ValueError(f"no context start ({ctx_start!r}) before the question")
    c += len(ctx_start)
    return Parts(body[:c], body[c:q], body[q:], prefix)


# Random values in the fixed text, per task (in-context examples' contexts are masked separately).
VALUE_MASKS = {
    "niah": [(r"(?<= for ).+?(?= mentioned)", "{query}")],
    "vt": [(r"\b\d{5}\b", "{value}"), (r"\b(?!VAR\b)[A-Z]{3,5}\b", "{var}")],
    "cwe": [(r"(?<=:) 1\. [^\n]*", " {answers}")],
    "fwe": [],
}


def mask(task: str, text: str, entry: dict) -> str:
    """``text`` with every in-context example's context replaced by ``{context}`` and the task's
    random values (query keys, chain values and variable names, example answers) by placeholders."""
    ctx_start, q_start = anchors(entry)
    text = re.sub(re.escape(ctx_start) + r".*?(?=" + re.escape(q_start) + ")", lambda _: ctx_start + "{context}", text, flags=re.S)
    for pattern, repl in VALUE_MASKS[task]:
        text = re.sub(pattern, repl, text)
    return text


NEEDLE = re.compile(r"One of the special magic (\w+) for (.+?) is: (\S+?)\.(?=\s|$)")


def inserts(task: str, context: str) -> Counter:
    """The formats of what the context is made of, values masked: needles (niah), chain lines
    (vt), list entries (cwe), coded words (fwe), with counts."""
    out: Counter = Counter()
    if task == "niah":
        for m in NEEDLE.finditer(context):
            out[f"One of the special magic {m[1]} for {{key}} is: {{value}}."] += 1
    elif task == "vt":
        for line in context.split("\n"):
            if line.startswith("VAR "):
                out[re.sub(r"\d+", "{value}", re.sub(r"(?<=VAR )[A-Z]+", "{var}", line))] += 1
    elif task == "cwe":
        nums = [int(n) for n in re.findall(r"(?:^| )(\d+)\. ", context)]
        out["{i}. {word}, i = 1, 2, ... joined by ' '" if nums == list(range(1, len(nums) + 1)) else "irregular numbering"] += len(nums)
    elif task == "fwe":
        for w in context.split(" "):
            out["..." if w == "..." else "{6 lower-case letters}" if re.fullmatch(r"[a-z]{6}", w) else "other"] += 1
    return out


def units(task: str, kind: str | None, context: str) -> tuple[int, str]:
    """Haystack units in ``context`` (count, what they are). niah noise: noise lines; niah
    needle: all lines (needles and distractor needles); niah essay: words once the needles are
    taken out (RULER's unit); vt: noise lines; cwe: distinct listed words; fwe: coded words
    (dots included)."""
    if task == "niah" and kind == "noise":
        return sum(line == NOISE for line in context.split("\n")), "noise lines"
    if task == "niah" and kind == "needle":
        return len([x for x in context.split("\n") if x]), "lines (needles + distractors)"
    if task == "niah":
        return len(NEEDLE.sub(" ", context).split()), "essay words"
    if task == "vt":
        return sum(line == NOISE for line in context.split("\n")), "noise lines"
    if task == "cwe":
        return len(set(re.split(r"(?:^| )\d+\. ", context)) - {""}), "distinct words"
    return len(context.split()), "coded words"


def example_units(task: str, pre: str, entry: dict) -> list[int]:
    """Units of the in-context examples in ``pre`` (vt: noise lines, RULER's as many as fit in
    500 tokens; cwe: distinct words, 20 below 4096 and 40 from it); empty for other tasks."""
    if task not in ("vt", "cwe"):
        return []
    ctx_start, q_start = anchors(entry)
    found = re.findall(re.escape(ctx_start) + "(.*?)" + re.escape(q_start), pre, flags=re.S)
    return [units(task, None, ctx)[0] for ctx in found]


def edges(context: str) -> str:
    lead = context[: len(context) - len(context.lstrip())]
    trail = context[len(context.rstrip()) :]
    return f"{lead!r}…{trail!r}"


def span(values: list[int]) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


# ---------------------------------------------------------------------------------------------
# RULER's side


def ruler_checkout(path: str | None) -> Path:
    if not path:
        raise Usage("--ruler PATH is required: a checkout of NVIDIA/RULER (with scripts/data/synthetic/niah.py)")
    root = Path(path).expanduser()
    if not (root / "scripts" / "data" / "synthetic" / "niah.py").is_file():
        raise Usage(f"--ruler {path}: not a RULER checkout (no scripts/data/synthetic/niah.py there)")
    return root


def ruler_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return out.stdout.strip()
    except OSError:
        pass
    return "unknown (not a git work tree; pass --ruler-commit)"


def sub_env(pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def prepare_copy(root: Path, work: Path, essay: str, env: dict) -> tuple[Path, list[str]]:
    """A copy of the checkout's scripts/ under ``work`` with the essay written in, and (offline)
    nltk's sentence splitter patched when its punkt data is missing; the notes of what was done."""
    need = subprocess.run([sys.executable, "-c", "import nltk, tenacity, wonderwords, scipy, yaml, tqdm, transformers"],
                          env=env, capture_output=True, text=True)  # fmt: skip
    if need.returncode != 0:
        last = (need.stderr.strip().splitlines() or ["?"])[-1]
        raise Usage(f"RULER's generators cannot import their dependencies ({last}); "
                    "pip install --target DIR nltk tenacity joblib click regex, then pass --pythonpath DIR")  # fmt: skip
    scripts = work / "scripts"
    shutil.copytree(root / "scripts", scripts, ignore=shutil.ignore_patterns("*.jsonl", "__pycache__"))
    notes = []
    (scripts / "data" / "synthetic" / "json").mkdir(parents=True, exist_ok=True)
    (scripts / "data" / "synthetic" / "json" / "PaulGrahamEssays.json").write_text(json.dumps({"text": essay}))
    words = scripts / "data" / "synthetic" / "json" / "english_words.json"
    try:
        json.loads(words.read_text())
    except (OSError, ValueError):
        words.write_text("{}")
        notes.append("`json/english_words.json` is missing or a Git LFS pointer in this checkout: in the temporary copy it is "
                     "`{}`. common_words_extraction.py draws from it only when a list needs more distinct words than the "
                     "8,166 wonderwords (never at these lengths; if it did, the generator would fail and the report say so).")  # fmt: skip
    punkt = subprocess.run([sys.executable, "-c", "from nltk.tokenize import sent_tokenize; sent_tokenize('A b. C d.')"],
                           env=env, capture_output=True, text=True)  # fmt: skip
    if punkt.returncode != 0:
        for name in ("niah.py", "variable_tracking.py"):
            f = scripts / "data" / "synthetic" / name
            src = f.read_text()
            if "from nltk.tokenize import sent_tokenize\n" in src:
                f.write_text(src.replace("from nltk.tokenize import sent_tokenize\n", PUNKT_PATCH, 1))
        notes.append("nltk's punkt data is not installed (no download offline): in the temporary copy only, niah.py's and "
                     "variable_tracking.py's `from nltk.tokenize import sent_tokenize` was replaced by a fallback to nltk's "
                     "untrained `PunktSentenceTokenizer().tokenize` (sentence boundaries only decide where essay needles go; "
                     "the essay text, its word count and every token count are unaffected).")  # fmt: skip
    return scripts, notes


def ruler_command(scripts: Path, name: str, tokenizer_dir: Path, length: int, samples: int, save_dir: Path) -> list[str]:
    """prepare.py's command for config ``name`` (``--model_template_type base``, one chunk), as an
    argv list (prepare.py builds the same words into a shell string)."""
    tasks = runpy.run_path(str(scripts / "data" / "synthetic" / "constants.py"))["TASKS"]
    templates = runpy.run_path(str(scripts / "data" / "template.py"))["Templates"]
    import yaml

    config = dict(yaml.safe_load((scripts / "synthetic.yaml").read_text())[name])
    config.update(tasks[config["task"]])
    template = templates["base"].format(task_template=config["template"]) + config.get("answer_prefix", "")
    extra = [w for k, v in config["args"].items() for w in (f"--{k}", str(v))]
    return [
        sys.executable, str(scripts / "data" / "synthetic" / f"{config['task']}.py"),
        "--save_dir", str(save_dir), "--save_name", name, "--subset", "validation",
        "--tokenizer_path", str(tokenizer_dir), "--tokenizer_type", "hf",
        "--max_seq_length", str(length), "--tokens_to_generate", str(config["tokens_to_generate"]),
        "--num_samples", str(samples), "--random_seed", str(RULER_SEED), *extra, "--template", template,
    ]  # fmt: skip


def run_ruler(scripts: Path, name: str, tokenizer_dir: Path, length: int, samples: int, work: Path, env: dict) -> tuple[list[dict], str]:
    save = work / f"out-{length}"
    cmd = ruler_command(scripts, name, tokenizer_dir, length, samples, save)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(scripts / "data"))
    out = save / name / "validation.jsonl"
    if done.returncode != 0 or not out.is_file():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"RULER's generator failed (exit {done.returncode}): {tail}"
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()], ""


# ---------------------------------------------------------------------------------------------
# Comparison


@dataclass
class Side:
    tokens: list[int]  # RULER's way: len(tokenize(whole prompt))
    own: list[int]  # ctxbench: len(ids); RULER: its record's length - budget
    units: list[int]
    example_units: list[int]
    fixed: dict[str, set[str]]  # pre / question / prefix, masked
    inserts: Counter
    edges: set[str]


def side(task: str, kind: str | None, entry: dict, texts: list[str], tokenize, own: list[int]) -> Side:
    s = Side([], own, [], [], {"pre": set(), "question": set(), "prefix": set()}, Counter(), set())
    for text in texts:
        p = split_prompt(text, entry)
        s.tokens.append(len(tokenize(text)))
        n, _ = units(task, kind, p.context)
        s.units.append(n)
        s.example_units += example_units(task, p.pre, entry)
        for part in ("pre", "question", "prefix"):
            s.fixed[part].add(mask(task, getattr(p, part), entry))
        s.inserts.update(inserts(task, p.context))
        s.edges.add(edges(p.context))
    return s


def compare(args, root: Path) -> str:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ctxbench.model.files import locate
    from ctxbench.synthetic import TOKENS_TO_GENERATE, build, load_haystack
    from ctxbench.synthetic.config import VARIANTS
    from ctxbench.synthetic.pieces import adds_bos

    hf_logging.set_verbosity_error()
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    kind_, path, gguf = locate(args.model)
    tok = AutoTokenizer.from_pretrained(str(path) if path else args.model, **({"gguf_file": gguf} if gguf else {}))
    haystack = load_haystack(args.haystack)
    env = sub_env(args.pythonpath)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ruler-sbs-") as tmp:
        work = Path(tmp)
        tok_dir = work / "tokenizer"
        tok.save_pretrained(tok_dir)
        again = AutoTokenizer.from_pretrained(str(tok_dir), trust_remote_code=True)  # what RULER's HFTokenizer loads
        probe = haystack.text[:20000] + "\nVAR ABCDE = 12345\n1. apple 2. pear One of the special magic uuids for x is: 0f1e."
        if again.tokenize(probe) != tok.tokenize(probe):
            raise SystemExit("the saved tokenizer tokenises differently from ctxbench's; cannot compare")
        scripts, notes = prepare_copy(root, work, haystack.text, env)
        tasks = runpy.run_path(str(scripts / "data" / "synthetic" / "constants.py"))["TASKS"]
        head = 1 if adds_bos(tok) else 0
        rows, fixed_rows, details, diffs = [], [], [], []
        for task, variant in CONFIGS:
            name = ruler_name(task, variant)
            if args.only and name not in args.only.split(","):
                continue
            entry = tasks[RULER_TASK[task]]
            budget = TOKENS_TO_GENERATE[task]
            if budget != entry["tokens_to_generate"]:
                diffs.append(f"{name}: budget {budget} (ctxbench) vs tokens_to_generate {entry['tokens_to_generate']} (RULER)")
            kind = VARIANTS[task][variant]["type_haystack"] if task == "niah" else None
            r_all, c_all = None, None
            for length in lengths:
                print(f"[{time.time() - t0:6.0f}s] {name} {length}", file=sys.stderr, flush=True)
                recs, err = run_ruler(scripts, name, tok_dir, length, args.samples, work, env)
                if err:
                    rows.append(f"| {name} | {length} | {budget} | {err} | | | | | | |")
                    diffs.append(f"{name} @ {length}: {err}")
                    continue
                r = side(task, kind, entry, [x["input"] + x["answer_prefix"] for x in recs], tok.tokenize,
                         [x["length"] - budget for x in recs])  # fmt: skip
                if r.tokens != r.own:
                    diffs.append(f"{name} @ {length}: RULER's recorded lengths {r.own} differ from the recount {r.tokens}")
                prompts = [build(task, variant, tok, length, None, 0, t, False, haystack, protocol="ruler") for t in range(args.samples)]
                c = side(task, kind, entry, [tok.decode(p.ids[head:], clean_up_tokenization_spaces=False) for p in prompts],
                         tok.tokenize, [len(p.ids) for p in prompts])  # fmt: skip
                if c.tokens != c.own:
                    diffs.append(f"{name} @ {length}: ctxbench's len(ids) {c.own} differ from the whole-text recount {c.tokens}")
                c_sent = [p.extra["haystack_units"] for p in prompts] if task == "niah" and kind == "essay" else []
                fit_r = all(n + budget <= length for n in r.tokens)
                fit_c = all(n + budget <= length for n in c.tokens + c.own)
                if not fit_r or not fit_c:
                    diffs.append(f"{name} @ {length}: prompt + budget over the length (RULER {fit_r}, ctxbench {fit_c})")
                unit_r = span(r.units) + (f" (example {span(r.example_units)})" if r.example_units else "")
                unit_c = span(c.units) + (f" (example {span(c.example_units)})" if c.example_units else "")
                if c_sent:
                    unit_c += f" ({span(c_sent)} sentences)"
                what = units(task, kind, "")[1]
                rows.append(f"| {name} | {length} | {budget} | {span(r.tokens)} | {span(c.tokens)} | {span(c.own)} | "
                            f"{'yes' if fit_r else '**no**'} | {'yes' if fit_c else '**no**'} | {unit_r} | {unit_c} | {what} |")  # fmt: skip
                r_all = merge(r_all, r)
                c_all = merge(c_all, c)
            if r_all is None or c_all is None:
                continue
            same = {part: r_all.fixed[part] == c_all.fixed[part] and len(r_all.fixed[part]) == 1 for part in r_all.fixed}
            fmt_same = set(r_all.inserts) == set(c_all.inserts)
            cells = ["identical" if same[part] else "**differs**" for part in ("pre", "question", "prefix")]
            fixed_rows.append(f"| {name} | {' | '.join(cells)} | {'identical' if fmt_same else '**differs**'} | "
                              f"{', '.join(sorted(r_all.edges))} | {', '.join(sorted(c_all.edges))} |")  # fmt: skip
            details.append(f"**{name}**\n")
            for part, label in (("pre", "before the context"), ("question", "question"), ("prefix", "answer prefix")):
                details.append(f"- {label}: " + show(r_all.fixed[part], c_all.fixed[part]))
                if not same[part]:
                    diffs.append(f"{name}: {label} differs: RULER {sorted(r_all.fixed[part])!r} vs ctxbench {sorted(c_all.fixed[part])!r}")
            details.append("- context made of: RULER " + fmt_counts(r_all.inserts) + "; ctxbench " + fmt_counts(c_all.inserts))
            if not fmt_same:
                diffs.append(f"{name}: insert formats differ: RULER {sorted(r_all.inserts)} vs ctxbench {sorted(c_all.inserts)}")
            if r_all.edges != c_all.edges:
                diffs.append(f"{name}: the context's leading/trailing whitespace differs: RULER {sorted(r_all.edges)} vs ctxbench {sorted(c_all.edges)}")
            details.append("")
    return render(args, root, lengths, rows, fixed_rows, details, diffs, notes, head)


def merge(acc: Side | None, s: Side) -> Side:
    if acc is None:
        return Side(list(s.tokens), list(s.own), list(s.units), list(s.example_units),
                    {k: set(v) for k, v in s.fixed.items()}, Counter(s.inserts), set(s.edges))  # fmt: skip
    acc.tokens += s.tokens
    acc.own += s.own
    for k, v in s.fixed.items():
        acc.fixed[k] |= v
    acc.inserts.update(s.inserts)
    acc.edges |= s.edges
    return acc


def show(r: set[str], c: set[str]) -> str:
    if r == c and len(r) == 1:
        return "identical, `" + json.dumps(next(iter(r)))[1:-1] + "`"
    return "RULER " + " / ".join(f"`{json.dumps(x)[1:-1]}`" for x in sorted(r)) + "; ctxbench " + " / ".join(
        f"`{json.dumps(x)[1:-1]}`" for x in sorted(c)
    )


def fmt_counts(c: Counter) -> str:
    return ", ".join(f"`{json.dumps(k)[1:-1]}` x{n}" for k, n in sorted(c.items())) or "-"


def render(args, root, lengths, rows, fixed_rows, details, diffs, notes, head) -> str:
    commit = args.ruler_commit or ruler_commit(root)
    out = [
        "# ctxbench's RULER prompts side by side with RULER's generators",
        "",
        f"- RULER: NVIDIA/RULER at commit `{commit}`; each generator run as its `scripts/data/prepare.py` runs it "
        f"(`--model_template_type base`, answer prefix appended to the template, `tokens_to_generate` from `constants.py`, "
        f"`synthetic.yaml`'s arguments, `--random_seed {RULER_SEED}`, `--tokenizer_type hf`), {args.samples} samples per config and length.",
        f"- ctxbench: `build(task, variant, tokenizer, length, None, seed=0, trial=0..{args.samples - 1}, chat=False, protocol=\"ruler\")`.",
        f"- Tokenizer: `{args.model}` (ctxbench's default model's, loaded as ctxbench loads it, saved with `save_pretrained` for RULER's "
        f"`AutoTokenizer.from_pretrained`; both tokenise identically). BOS added by the tokenizer: {'yes' if head else 'no'}.",
        f"- Essay haystack: ctxbench's `{args.haystack or 'pydoc'}` text, written into RULER's `json/PaulGrahamEssays.json`.",
        "- Command: `python scripts/ruler_side_by_side.py --ruler RULER " + f"--lengths {','.join(map(str, lengths))} --samples {args.samples}"
        + (" --pythonpath DIR" if args.pythonpath else "") + (f" --out {args.out}`" if args.out else "`"),
        "- Tokens are counted as RULER counts them: `len(tokenizer.tokenize(input + answer_prefix))`, the whole prompt with "
        "its answer prefix, no special tokens (RULER's `HFTokenizer.text_to_tokens`); its `length` field is that plus "
        "`tokens_to_generate` and must be <= `max_seq_length`. ctxbench's prompts are decoded and counted the same way "
        "(\"RULER count\"); \"ctxbench ids\" is `len(ids)`, what ctxbench feeds the model (pieces tokenised separately, BOS included "
        "when the tokenizer adds one). \"fits\" = every sample's prompt + budget <= length (for ctxbench by both counts).",
        "- Fixed text is compared after masking random values: in-context examples' contexts -> `{context}`, niah query keys "
        "-> `{query}`, vt's 5-digit values -> `{value}` and variable names -> `{var}`, cwe's example answers -> `{answers}`. "
        "Each prompt is cut as RULER cuts it: the answer prefix at the last match of its first 10 characters, the question at the "
        "last \"\\nWhat\"/\"\\nQuestion:\", the context after the last template text before `{context}`.",
    ]
    out += [f"- {n}" for n in notes]
    out += [
        "",
        "## Lengths",
        "",
        "| config | length | budget | RULER tokens | ctxbench tokens (RULER count) | ctxbench ids | RULER fits | ctxbench fits | RULER units | ctxbench units | unit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |",
        *rows,
        "",
        "## Fixed text",
        "",
        "| config | text before the context | question | answer prefix | needle / line / entry format | RULER context edges | ctxbench context edges |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *fixed_rows,
        "",
        "### Masked fixed text and context make-up (all lengths and samples together)",
        "",
        *details,
        "## Differences found",
        "",
    ]
    out += [f"- {d}" for d in diffs] or ["- none"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruler", help="a checkout of NVIDIA/RULER (required)")
    ap.add_argument("--lengths", default=DEFAULT_LENGTHS, help=f"comma-separated lengths (default {DEFAULT_LENGTHS})")
    ap.add_argument("--samples", type=int, default=5, help="samples per config and length (default 5)")
    ap.add_argument("--out", help="write the markdown report here (default: stdout)")
    ap.add_argument("--model", default="smollm2-135m", help="whose tokenizer (ctxbench model spec; default smollm2-135m)")
    ap.add_argument("--haystack", help="ctxbench essay haystack spec (default: ctxbench's default, pydoc prose)")
    ap.add_argument("--pythonpath", help="a directory prepended to PYTHONPATH for RULER's generators (nltk, tenacity)")
    ap.add_argument("--ruler-commit", help="the RULER commit to print when --ruler is not a git work tree")
    ap.add_argument("--only", help="comma-separated RULER config names to run (default: all 11)")
    args = ap.parse_args(argv)
    try:
        root = ruler_checkout(args.ruler)
        if args.samples < 1:
            raise Usage("--samples must be at least 1")
        if not all(x.strip().isdigit() and int(x) > 0 for x in args.lengths.split(",") if x.strip()):
            raise Usage(f"--lengths {args.lengths}: give positive integers separated by commas")
        report = compare(args, root)
    except Usage as e:
        print(f"ruler_side_by_side: error: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(report)
    else:
        sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
