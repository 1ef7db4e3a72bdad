"""RULER's synthetic prompts (ctxbench.synthetic), as a spec.

With a byte-level tokenizer (one token per byte) lengths and positions can be checked by hand;
the slow test repeats the length checks with SmolLM2's real tokenizer.
"""

from __future__ import annotations

import ast
import collections
import re

import pytest
from helpers import ROOT, byte_tokenizer
from tokenizers import processors

from ctxbench.errors import UserError
from ctxbench.synthetic import (
    NOISE,
    VARIANTS,
    TooShort,
    build,
    load_haystack,
    min_length,
    postprocess,
    score,
    string_match_all,
    string_match_part,
)

ALL = [(task, variant) for task, variants in VARIANTS.items() for variant in variants]
NIAH = list(VARIANTS["niah"])


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def text(tok, ids) -> str:
    return tok.decode(list(ids))


def lengths_for(task: str, variant: str, tok) -> list[int]:
    low = min_length(task, variant, tok) + 40  # other trials' keys may be a few tokens longer
    return [low, low + 1, low + 333, low + 1001, low + 1777]


# -- exact length -----------------------------------------------------------------------------


@pytest.mark.parametrize("task,variant", ALL)
def test_prompt_has_exactly_the_requested_length(tok, task, variant):
    depths = [None] if task in ("cwe", "fwe") else [0.0, 0.13, 0.5, 0.77, 1.0, None]
    for length in lengths_for(task, variant, tok):
        for depth in depths:
            for trial in range(2):
                p = build(task, variant, tok, length, depth, seed=3, trial=trial)
                assert len(p.ids) == length, (length, depth, trial)


def test_cwe_above_4096_uses_rulers_long_repeats_and_still_fits_exactly(tok):
    for length in (8001, 8002, 9777):
        p = build("cwe", None, tok, length)
        assert len(p.ids) == length
        assert p.extra["repeats"] == (30, 3)
    assert build("cwe", None, tok, 3001).extra["repeats"] == (6, 1)


# -- RULER's wording, answers, budgets, metrics -----------------------------------------------


@pytest.mark.parametrize("task,variant", ALL)
def test_prompt_ends_with_rulers_answer_prefix_and_carries_rulers_budget_and_metric(tok, task, variant):
    p = build(task, variant, tok, 3000, 0.5)
    body = text(tok, p.ids)
    budget = {"niah": 128, "vt": 30, "cwe": 120, "fwe": 50}[task]
    assert (p.max_new_tokens, p.metric) == (budget, "string_match_all")
    if task == "niah":
        one = VARIANTS["niah"][variant]["num_needle_v"] * VARIANTS["niah"][variant]["num_needle_q"] == 1
        kind = "uuid" if VARIANTS["niah"][variant]["type_needle_v"] == "uuids" else "number"
        q = p.extra["queries"]
        query = q[0] if len(q) == 1 else ", ".join(q[:-1]) + ", and " + q[-1]
        if one:
            assert body.startswith(f"A special magic {kind} is hidden within the following text.")
            assert body.endswith(f"\nWhat is the special magic {kind} for {query} mentioned in the provided text?"
                                 f" The special magic {kind} for {query} mentioned in the provided text is")
        else:
            assert body.startswith(f"Some special magic {kind}s are hidden within the following text.")
            assert f"\nWhat are all the special magic {kind}s for {query} mentioned in the provided text?" in body
            assert body.endswith(f"? The special magic {kind}s for {query} mentioned in the provided text are")
    elif task == "vt":
        v = p.extra["value"]
        assert body.endswith(f"in the text above. Answer: According to the chain(s) of variable assignment in the text above, 5 variables are assigned the value {v}, they are: ")
    elif task == "cwe":
        assert body.endswith("\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 words that appear most often in the list are:")
    else:
        assert body.startswith("Read the following coded text and track the frequency of each coded word. Find the three most frequently appeared coded words. ")
        assert body.endswith("above coded text? Answer: According to the coded text above, the three most frequently appeared words are:")


def test_string_match_all_is_the_fraction_of_answers_found():
    assert string_match_all("The special magic numbers are 123 and 456", ["123", "456", "789"]) == pytest.approx(2 / 3)
    assert string_match_all("VAR abcde, FGHIJ", ["ABCDE", "FGHIJ"]) == 1.0  # case-insensitive
    assert string_match_all("nothing", ["1"]) == 0.0


def test_string_match_part_is_one_when_any_answer_is_found():
    assert string_match_part("it is 456", ["123", "456"]) == 1.0
    assert string_match_part("it is 4 5 6", ["123", "456"]) == 0.0
    assert string_match_part("PARIS", ["paris", "london"]) == 1.0


def test_scoring_postprocesses_like_rulers_evaluate():
    assert postprocess("  1234567\x00\t8  ") == "1234567\n\n8"
    assert score("string_match_all", " 1234567\x1f", ["1234567"]) == 1.0


# -- niah: needles, depth, distractors --------------------------------------------------------


@pytest.mark.parametrize("variant", NIAH)
def test_niah_has_every_needle_once_and_the_asked_ones_at_the_answer_positions(tok, variant):
    cfg = VARIANTS["niah"][variant]
    for trial in range(3):
        p = build("niah", variant, tok, 2500, 0.4, trial=trial)
        body = text(tok, p.ids)
        keys, values = p.extra["keys"], p.extra["values"]
        assert len(keys) == max(cfg["num_needle_k"], cfg["num_needle_q"])
        assert all(len(v) == cfg["num_needle_v"] for v in values)
        assert len(p.answers) == cfg["num_needle_v"] * cfg["num_needle_q"] == len(p.needle_positions)
        plural = cfg["type_needle_v"]
        for key, vals in zip(keys, values, strict=True):
            for value in vals:
                assert body.count(f"One of the special magic {plural} for {key} is: {value}.") == 1
        for answer in p.answers:
            assert body.count(answer) == 1  # values never collide with the haystack or each other
        for pos in p.needle_positions:
            assert text(tok, p.ids[pos:]).lstrip().startswith(f"One of the special magic {plural} for ")
        if cfg["type_haystack"] != "needle":
            assert body.count("One of the special magic") == sum(map(len, values))


@pytest.mark.parametrize("variant", ["single_1", "single_2", "multikey_2", "multiquery"])
def test_the_first_asked_needle_sits_at_the_haystack_boundary_nearest_the_depth(tok, variant):
    length = 4000
    for depth in (0.0, 0.25, 0.5, 0.9, 1.0):
        p = build("niah", variant, tok, length, depth)
        room = length - p.extra["min_length"]
        # one haystack piece: a noise line (90 bytes), a needle line or an essay sentence
        assert abs(p.extra["depth_used"] - depth) * room <= 300
        assert min(p.needle_positions) >= p.shared_len
    shallow = build("niah", "single_1", tok, length, 0.1).needle_positions[0]
    deep = build("niah", "single_1", tok, length, 0.9).needle_positions[0]
    assert shallow < 0.2 * length < 0.8 * length < deep


def test_niah_depth_none_draws_one_of_rulers_40_depths(tok):
    depths = {build("niah", "single_1", tok, 2000, None, trial=t).extra["depth"] for t in range(12)}
    assert len(depths) > 1
    assert all(round(d * 39) / 39 == pytest.approx(d, abs=0.006) for d in depths)


@pytest.mark.parametrize("variant", ["multikey_1", "multikey_2", "multikey_3"])
def test_distractors_never_carry_the_asked_key(tok, variant):
    for trial in range(12):
        p = build("niah", variant, tok, 3000, 0.5, trial=trial)
        (key,) = p.extra["queries"]
        assert key not in p.extra["distractor_keys"]
        body = text(tok, p.ids)
        # the asked key is in exactly one needle, and named twice more by the question and answer prefix
        assert len(re.findall(rf"for {re.escape(key)} is: ", body)) == 1
        assert body.count(key) == 3
        if variant != "multikey_1":
            assert p.extra["haystack_needles"] > 10  # the haystack is made of distractor needles
            lines = [ln for ln in body.split("\n") if ln.startswith("One of the special magic")]
            assert len({ln.split(" is: ")[0] for ln in lines}) >= len(lines) - 1  # keys drawn at random


def test_multikey_3_uses_uuid_keys_and_values(tok):
    p = build("niah", "multikey_3", tok, 2000, 0.5)
    uuid = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    assert uuid.match(p.extra["queries"][0]) and uuid.match(p.answers[0])


def test_noise_haystack_is_rulers_repeated_line(tok):
    body = text(tok, build("niah", "single_1", tok, 2000, 0.5).ids)
    assert body.count(NOISE) >= 15
    assert "afterwards.\n" + NOISE + "\n" in body  # one newline between lines, as RULER joins them


# -- vt, cwe, fwe -----------------------------------------------------------------------------


def test_vt_chain_hops_follow_the_first_assignment_in_order(tok):
    for depth in (0.0, 0.3, 0.8):
        p = build("vt", None, tok, 4000, depth, trial=1)
        names, value = p.extra["variables"], p.extra["value"]
        assert list(p.answers) == names and len(names) == 5 and all(re.fullmatch(r"[A-Z]{5}", n) for n in names)
        body = text(tok, p.ids)
        assert f"\nVAR {names[0]} = {value}\n" in body
        for a, b in zip(names, names[1:], strict=False):
            assert f"\nVAR {b} = VAR {a} \n" in body
        assert list(p.needle_positions) == sorted(p.needle_positions)
        assert p.needle_positions[0] == p.shared_len
        assert abs(p.extra["depth_used"] - depth) < 0.05


def test_vt_starts_with_a_solved_example_of_at_most_500_tokens(tok):
    p = build("vt", None, tok, 3000, 0.5)
    body = text(tok, p.ids)
    shot, task = body.split("\n\nMemorize and track", 1)[0], body
    assert shot.startswith("Memorize and track the chain(s) of variable assignment")
    assert re.search(r"they are:  [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3}$", shot)
    # RULER sizes the example to 500 tokens but never below 5 noise lines
    assert shot.count(NOISE) == 5 or len(shot) <= 500 + 30
    assert task.count("Memorize and track") == 2


def test_cwe_common_words_are_listed_most_often(tok):
    for length, (often, rarely) in ((3001, (6, 1)), (9001, (30, 3))):
        p = build("cwe", None, tok, length, trial=2)
        listed = text(tok, p.ids).split("Memorize the ones that appear most often.\n")[-1].split("\nQuestion:")[0]
        words = collections.Counter(re.findall(r"\d+\. (\S+(?: hoc)?)", listed))
        assert len(p.answers) == 10
        for w in p.answers:
            assert words[w] == often
        rest = [c for w, c in words.items() if w not in p.answers]
        assert max(rest) <= rarely


def test_fwe_answers_are_the_three_most_frequent_coded_words_after_the_dots(tok):
    p = build("fwe", None, tok, 3000, trial=4)
    coded = text(tok, p.ids).split("coded words. ", 1)[1].split("\nQuestion:")[0].split()
    counts = collections.Counter(w for w in coded if re.fullmatch(r"[a-z]{6}", w))
    top = [w for w, _ in counts.most_common(3)]
    assert set(top) == set(p.answers)
    assert counts[p.answers[0]] > counts[p.answers[1]] > counts[p.answers[2]]
    assert coded.count("...") > counts[p.answers[0]]  # the dots are the noise word, ranked first
    assert p.extra["vocab"] == 3000 // 50


# -- determinism and the shared prefix ---------------------------------------------------------


@pytest.mark.parametrize("task,variant", ALL)
def test_same_inputs_give_identical_prompts_and_seeds_change_them(tok, task, variant):
    args = (task, variant, tok, 2700, 0.35)
    a, b = build(*args, seed=1, trial=2), build(*args, seed=1, trial=2)
    assert a == b
    assert build(*args, seed=2, trial=2).ids != a.ids
    assert build(*args, seed=1, trial=3).ids != a.ids


@pytest.mark.parametrize("task,variant", ALL)
def test_prompts_of_one_length_share_everything_before_their_first_trial_token(tok, task, variant):
    length = 4500 if task != "cwe" else 3000
    depths = [None] if task in ("cwe", "fwe") else [0.3, 0.6, 0.9]
    prompts = [build(task, variant, tok, length, d, seed=5, trial=t) for d in depths for t in range(4)]
    shared = min(p.shared_len for p in prompts)
    assert all(p.ids[:shared] == prompts[0].ids[:shared] for p in prompts)
    if task == "niah" and variant != "multikey_1":  # multikey_1's unasked needles may sit anywhere
        assert shared > 0.25 * length
    if task == "vt":
        shot = prompts[0].extra["example_tokens"]
        assert shared > shot + 0.25 * (length - shot)


def test_the_prompt_does_not_depend_on_anything_but_its_inputs():
    src = ROOT / "ctxbench" / "synthetic"
    imported = set()
    for f in src.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    assert not imported & {"torch", "transformers", "numpy"}
    assert "method" not in build.__code__.co_varnames


# -- BOS, chat, bad input ----------------------------------------------------------------------


def test_a_bos_token_is_kept_and_counted(tok):
    bos_tok = byte_tokenizer()
    bos_tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 256)])
    for task, variant in [("niah", "single_2"), ("vt", "default"), ("fwe", "default")]:
        p = build(task, variant, bos_tok, 2501, 0.5)
        assert p.ids[0] == 256 and len(p.ids) == 2501
        assert p.ids[1:] != build(task, variant, tok, 2501, 0.5).ids[: 2500]  # one token less of haystack


def test_chat_puts_the_task_in_the_template_and_the_answer_prefix_after_it(tok):
    chat_tok = byte_tokenizer()
    chat_tok.chat_template = "{% for m in messages %}[U]{{ m['content'] }}[/U]{% endfor %}{% if add_generation_prompt %}[A]{% endif %}"
    p = build("niah", "single_1", chat_tok, 1500, 0.5, chat=True)
    body = text(chat_tok, p.ids)
    assert len(p.ids) == 1500
    assert body.startswith("[U]A special magic number is hidden")
    assert re.search(r"mentioned in the provided text\?\[/U\]\[A\] The special magic number for \S+ mentioned in the provided text is$", body)
    with pytest.raises(UserError, match="chat template"):
        build("niah", "single_1", tok, 1500, 0.5, chat=True)


@pytest.mark.parametrize("task,variant", [("vt", "default"), ("niah", "multikey_3")])
def test_too_short_a_length_raises_naming_the_minimum(tok, task, variant):
    # with one token per byte these prompts' fixed text has the same size for every trial
    need = min_length(task, variant, tok)
    assert len(build(task, variant, tok, need, 0.5, trial=7).ids) == need
    with pytest.raises(TooShort, match=f"at least {need}") as err:
        build(task, variant, tok, need - 1, 0.5, trial=7)
    assert isinstance(err.value, UserError) and err.value.minimum == need


@pytest.mark.parametrize("task,variant", ALL)
def test_tiny_lengths_raise_a_user_error(tok, task, variant):
    with pytest.raises(UserError, match="shorter than the RULER"):
        build(task, variant, tok, 50, 0.5)


def test_bad_names_and_depths_raise_user_errors(tok):
    with pytest.raises(UserError, match="did you mean 'single_1'"):
        build("niah", "single1", tok, 2000, 0.5)
    with pytest.raises(UserError, match="synthetic task"):
        build("qa", None, tok, 2000, 0.5)
    with pytest.raises(UserError, match="outside"):
        build("niah", "single_1", tok, 2000, 1.5)


# -- haystacks ---------------------------------------------------------------------------------


def test_default_essay_is_the_prose_of_pythons_language_reference():
    a, b = load_haystack(None), load_haystack(None)
    assert a == b and a.name.startswith("pydoc-topics-")
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", a.digest)
    assert len(a.text) > 100_000
    assert "::=" not in a.text and ">>>" not in a.text and "\n" not in a.text


def test_a_missing_haystack_file_raises_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_haystack(str(tmp_path / "nope.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .txt or .md"):
        load_haystack(str(tmp_path / "empty"))


def test_a_user_haystack_directory_is_read_in_order_and_used(tmp_path, tok):
    d = tmp_path / "essays"
    d.mkdir()
    (d / "b.md").write_text("Beta sentence two. " * 50)
    (d / "a.txt").write_text("Alpha  sentence\none. " * 50)
    hay = load_haystack(str(d))
    assert hay.text.startswith("Alpha sentence one.") and "Beta sentence two." in hay.text
    p = build("niah", "single_2", tok, 3000, 0.5, haystack=hay)
    assert "Alpha sentence one." in text(tok, p.ids) and p.extra["essay"]["digest"] == hay.digest
    assert len(p.ids) == 3000


# -- the real tokenizer ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_tok():
    from transformers import AutoTokenizer

    from ctxbench.model.files import ALIASES

    path = ALIASES["smollm2-135m"]()  # only the tokenizer, read from the GGUF file
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.slow
@pytest.mark.parametrize("task,variant", ALL)
def test_exact_length_with_smollm2s_tokenizer(smol_tok, task, variant):
    opening = smol_tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)
    start = smol_tok(opening, add_special_tokens=False)["input_ids"][:3]
    for chat in (False, True):
        need = min_length(task, variant, smol_tok, chat=chat)
        assert need < 800
        for length in (need + 40, 1001, 4095, 4096, 8191, 32768):
            for depth in ([None] if task in ("cwe", "fwe") else [0.0, 0.5, 1.0]):
                p = build(task, variant, smol_tok, length, depth, trial=1, chat=chat)
                assert len(p.ids) == length
                assert (list(p.ids[:3]) == start) == chat
                body = smol_tok.decode(list(p.ids))
                for answer in p.answers:
                    assert answer in body


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("essay.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is binary, not text"),
        ("essay.txt", "Caf\u00e9 society. It was late. ".encode("latin-1") * 20, "is not UTF-8 text"),
        ("essay.txt", b"  \n\n  ", "is empty"),
        ("essays.json", b'{"text": 3}', 'has no "text" string'),
        ("essays.json", b'{"text": "cut', "is not JSON"),
    ],
)
def test_binary_non_utf8_empty_or_malformed_haystacks_are_refused(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        load_haystack(str(path))


def test_an_empty_file_in_a_haystack_directory_is_named(tmp_path):
    d = tmp_path / "essays"
    d.mkdir()
    (d / "a.txt").write_text("Alpha sentence one. Alpha sentence two. " * 20)
    (d / "b.txt").write_text("")
    with pytest.raises(UserError, match=r"b\.txt' is empty"):
        load_haystack(str(d))


def test_rulers_essay_json_is_read_as_its_text(tmp_path):
    import json

    prose = "How to start a startup. You need three things.\n\nGood people. " * 30
    (tmp_path / "PaulGrahamEssays.json").write_text(json.dumps({"text": prose}))
    hay = load_haystack(str(tmp_path / "PaulGrahamEssays.json"))
    assert hay.text == re.sub(r"\s+", " ", prose).strip() and hay.name == "PaulGrahamEssays.json"
