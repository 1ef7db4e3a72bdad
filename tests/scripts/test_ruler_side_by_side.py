"""scripts/ruler_side_by_side.py: its pure parts (cutting a RULER record into the text before the
context, the context, the question and the answer prefix; masking random values; counting
haystack units and needle formats) and its usage errors. No RULER checkout or tokenizer needed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from helpers import ROOT

SCRIPT = ROOT / "scripts" / "ruler_side_by_side.py"


@pytest.fixture(scope="module")
def sbs():
    spec = importlib.util.spec_from_file_location("ruler_side_by_side", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


# RULER's constants.TASKS entries, as its constants.py has them.
NIAH = {
    "tokens_to_generate": 128,
    "template": "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} "
    "for {query} mentioned in the provided text?",
    "answer_prefix": " The special magic {type_needle_v} for {query} mentioned in the provided text are",
}
CWE = {
    "tokens_to_generate": 120,
    "template": "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
    "that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?",
    "answer_prefix": " Answer: The top 10 words that appear most often in the list are:",
}
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
PRE = "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you about the number afterwards.\n"
NEEDLE = "One of the special magic numbers for ad hoc-dump truck is: 1234567."
QUESTION = "\nWhat is the special magic number for ad hoc-dump truck mentioned in the provided text?"
PREFIX = " The special magic number for ad hoc-dump truck mentioned in the provided text is"


def test_anchors_come_from_the_template(sbs):
    assert sbs.anchors(NIAH) == (" afterwards.\n", "\nWhat")
    assert sbs.anchors(CWE)[0].startswith("Below is a numbered list") and sbs.anchors(CWE)[1] == "\nQuestion:"


def test_a_niah_record_splits_into_its_four_parts(sbs):
    context = "\n".join([NOISE, NOISE, NEEDLE, NOISE])
    record = {"input": PRE + context + QUESTION, "answer_prefix": PREFIX}  # as niah.py writes it
    parts = sbs.split_prompt(record["input"] + record["answer_prefix"], NIAH)
    assert parts == sbs.Parts(PRE, context, QUESTION, PREFIX)


def test_a_cwe_record_splits_after_its_in_context_example(sbs):
    instruction, _ = sbs.anchors(CWE)
    example = instruction + "1. cat 2. dog 3. cat" + "\nQuestion: What are the 10 most common words in the above list?" + CWE["answer_prefix"] + " 1. cat\n"
    text = example + instruction + "1. emu 2. owl" + "\nQuestion: What are the 10 most common words in the above list?" + CWE["answer_prefix"]
    parts = sbs.split_prompt(text, CWE)
    assert parts.pre == example + instruction
    assert parts.context == "1. emu 2. owl"
    assert parts.prefix == CWE["answer_prefix"]
    masked = sbs.mask("cwe", parts.pre, CWE)
    assert masked == instruction + "{context}\nQuestion: What are the 10 most common words in the above list?" + CWE["answer_prefix"] + " {answers}\n" + instruction
    assert sbs.example_units("cwe", parts.pre, CWE) == [2]


def test_a_prompt_without_the_question_is_refused(sbs):
    with pytest.raises(ValueError, match="no question"):
        sbs.split_prompt(PRE + NOISE + PREFIX, NIAH)


def test_masking_keeps_the_template_and_drops_the_query(sbs):
    assert sbs.mask("niah", QUESTION, NIAH) == "\nWhat is the special magic number for {query} mentioned in the provided text?"
    assert sbs.mask("niah", PREFIX, NIAH) == " The special magic number for {query} mentioned in the provided text is"


def test_needle_formats_and_units(sbs):
    context = "\n".join([NOISE, NEEDLE, NOISE, NOISE])
    assert sbs.inserts("niah", context) == {"One of the special magic numbers for {key} is: {value}.": 1}
    assert sbs.units("niah", "noise", context) == (3, "noise lines")
    essay = "First one here. " + NEEDLE + " Second one."
    assert sbs.units("niah", "essay", essay)[0] == 5  # the needle's words are not haystack
    assert sbs.inserts("cwe", "1. a 2. b 3. c") == {"{i}. {word}, i = 1, 2, ... joined by ' '": 3}
    assert "irregular numbering" in sbs.inserts("cwe", "1. a 3. b")
    assert sbs.inserts("fwe", "abcdef ... ghijkl ...") == {"{6 lower-case letters}": 2, "...": 2}
    assert sbs.inserts("vt", "VAR ABCDE = 12345\n" + NOISE + "\nVAR FGHIJ = VAR ABCDE ") == {
        "VAR {var} = {value}": 1, "VAR {var} = VAR {var} ": 1}  # fmt: skip


def test_the_context_edges_show_leading_whitespace(sbs):
    assert sbs.edges(" a b") == "' '…''"
    assert sbs.edges("a b") == "''…''"


def test_a_missing_ruler_checkout_is_one_line_and_exit_2(sbs, tmp_path, capsys):
    assert sbs.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--ruler PATH is required" in err
    assert sbs.main(["--ruler", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a RULER checkout" in err


@pytest.mark.integration
def test_the_command_line_exits_2_without_ruler():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
