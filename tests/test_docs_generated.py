"""The docs pages and the README say what the code and the committed results say: every block that
restates them (each command's --help, the method registry, the results columns, the measured tables
from ``ctxbench report``) is a cog block, and ``cog --check`` fails when one is stale.

To regenerate after changing a command, a method, a column or a results file:

    .venv/bin/cog -I scripts -r README.md docs/*.md
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
REGENERATE = ".venv/bin/cog -I scripts -r README.md docs/*.md"


def _cog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cogapp", "-I", "scripts", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


@pytest.mark.integration  # cog in a subprocess, about 7 s
def test_every_generated_block_is_what_the_code_and_the_committed_results_give_now():
    proc = _cog("--check", "--diff", *PAGES)
    assert proc.returncode == 0, f"stale generated docs; run `{REGENERATE}` and commit:\n{proc.stdout[-6000:]}{proc.stderr[-3000:]}"


def test_the_pages_that_restate_code_have_their_blocks():
    """A generated table moved out of its cog block would no longer be checked."""
    wanted = {
        "README.md": ["docgen.headline_ppl(", "docgen.method_families(", "docgen.parity_summary(", "docgen.backend_bench(",
                      "docgen.say_readme_headline("],
        "docs/engines.md": ["docgen.gpu_status("],
        "docs/design.md": ["docgen.gpu_status("],
        "docs/performance.md": ["docgen.gpu_status("],
        "docs/backends.md": ["docgen.backend_methods(", "docgen.architectures_table(", "docgen.parity_summary(", "docgen.parity_table(", "docgen.backend_bench(",
                             "docgen.dtype_control("],
        "docs/cli.md": ["docgen.cli_reference("],
        "docs/tune.md": ["docgen.tune_spaces(", "docgen.tune_guard(", "docgen.tune_results(", "docgen.tune_bench("],
        "docs/methods.md": ["docgen.methods_table(", "docgen.method_parameters(", "docgen.factor_free("],
        "docs/results-files.md": ["docgen.results_columns("],
        "docs/tasks.md": ["docgen.proxy_metrics(", "docgen.reference_table("],
        "docs/real-data.md": ["docgen.reference_table("],
        "docs/troubleshooting.md": ["docgen.error_examples("],
        "docs/results.md": ["docgen.report(", "docgen.proxy_study(", "docgen.ruler_tasks_2k(", "docgen.prompt_tokens(",
                            "docgen.attention_table(", "docgen.gpu_status(", "docgen.say_x4_inside(", "docgen.since_2024_table(",
                            "docgen.say_since_2024_verdict(", "docgen.say_string_16k("],
        "docs/statistics.md": ["docgen.say_ppl_effective_rule(", "docgen.quickstart_paired("],
        "docs/suites.md": ["docgen.say_suite_costs("],
        "docs/reading-the-output.md": ["docgen.quickstart_plan(", "docgen.quickstart_table(", "docgen.say_quickstart_brackets(",
                                       "docgen.report(", "docgen.say_paired_reading(", "docgen.terminal("],
    }  # fmt: skip
    for page, calls in wanted.items():
        text = (ROOT / page).read_text()
        for call in calls:
            assert f"[[[cog import docgen; {call}" in text or f"\n{call}" in text, (page, call)


def test_no_page_states_the_gpu_status_by_hand():
    """What has run on a GPU is said once, by ``docgen.gpu_status`` from ``results/gpu/``: a sentence
    written by hand ("no GPU has run this code") goes stale the day a GPU runs it."""
    stale = ("no GPU has run", "has not run on a GPU", "GPU plans have not been measured", "The CUDA path has run on a GPU")
    for page in PAGES:
        text = (ROOT / page).read_text()
        outside = "".join(part.split("<!-- [[[end]]] -->", 1)[-1] for part in text.split("docgen.gpu_status("))
        for phrase in stale:
            assert phrase not in outside, (page, phrase)
