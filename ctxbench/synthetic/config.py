"""RULER's task wording and the 13-config table, restricted to the 11 synthetic configs built here.

RULER (Hsieh et al., 2024, arXiv 2404.06654), github.com/NVIDIA/RULER:
templates, answer prefixes and ``tokens_to_generate`` follow ``scripts/data/synthetic/constants.py``;
the per-config arguments follow ``scripts/synthetic.yaml``; the metric of each task follows
``scripts/eval/synthetic/constants.py``. (qa_1 / qa_2 need SQuAD / HotpotQA and are not here.)

RULER appends the answer prefix to the template and formats the whole string once; the prompt
ends with the answer prefix so the model continues it.
"""

from __future__ import annotations

# Task wording: (instruction before the context, question after it, answer prefix).
# The text between instruction and question is the context (haystack, word list, coded text).
NIAH_INSTRUCTION = (
    "Some special magic {type_needle_v} are hidden within the following text. "
    "Make sure to memorize it. I will quiz you about the {type_needle_v} afterwards.\n"
)
NIAH_QUESTION = "\nWhat are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
NIAH_ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
# niah.py: the needle always names the plural type, even when the template is made singular.
NIAH_NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."

VT_INSTRUCTION = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n"
VT_QUESTION = "\nQuestion: Find all variables that are assigned the value {query} in the text above."
VT_ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, "
    "{num_v} variables are assigned the value {query}, they are: "
)

CWE_INSTRUCTION = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n"
)
CWE_QUESTION = "\nQuestion: What are the {num_cw} most common words in the above list?"
CWE_ANSWER_PREFIX = " Answer: The top {num_cw} words that appear most often in the list are:"

FWE_INSTRUCTION = (
    "Read the following coded text and track the frequency of each coded word. "
    "Find the three most frequently appeared coded words."
)
FWE_QUESTION = (
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?"
)
FWE_ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"

# scripts/data/synthetic/constants.py, tokens_to_generate
TOKENS_TO_GENERATE = {"niah": 128, "vt": 30, "cwe": 120, "fwe": 50}
# scripts/eval/synthetic/constants.py: every synthetic task is scored with string_match_all
# (string_match_part is RULER's metric for qa only).
METRIC = {"niah": "string_match_all", "vt": "string_match_all", "cwe": "string_match_all", "fwe": "string_match_all"}

# scripts/synthetic.yaml. niah: num_needle_k is raised to num_needle_q as niah.py does.
VARIANTS: dict[str, dict[str, dict]] = {
    "niah": {
        "single_1": dict(type_haystack="noise", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=1),
        "single_2": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=1),
        "single_3": dict(type_haystack="essay", type_needle_k="words", type_needle_v="uuids", num_needle_k=1, num_needle_v=1, num_needle_q=1),
        "multikey_1": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=4, num_needle_v=1, num_needle_q=1),
        "multikey_2": dict(type_haystack="needle", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=1),
        "multikey_3": dict(type_haystack="needle", type_needle_k="uuids", type_needle_v="uuids", num_needle_k=1, num_needle_v=1, num_needle_q=1),
        "multivalue": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=4, num_needle_q=1),
        "multiquery": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=4, num_needle_v=1, num_needle_q=4),
    },
    # variable_tracking.py defaults: 5-letter variable names, 5-digit values, one in-context example
    # of at most 500 tokens (3-letter names) before the task.
    "vt": {"default": dict(type_haystack="noise", num_chains=1, num_hops=4, icl_max_tokens=500)},
    # common_words_extraction.py: below 4096 tokens RULER uses 6/1 repeats (and a 20-word example
    # with 3/1); from 4096 on, the yaml's 30/3 (and a 40-word example with 10/3). One example.
    "cwe": {"default": dict(freq_cw=30, freq_ucw=3, num_cw=10, num_fewshot=1, short_below=4096, short_freq_cw=6, short_freq_ucw=1)},
    # freq_words_extraction.py: 6-letter coded words, vocabulary of (length - 50) // 50 (the length less
    # its generation budget), Zipf counts.
    "fwe": {"default": dict(alpha=2.0, coded_wordlen=6, vocab_per_tokens=50)},
}


def ruler_name(task: str, variant: str) -> str:
    """RULER's config name (synthetic.yaml): ``niah_single_1``, ``vt``, ``cwe``, ``fwe``: the task,
    with the variant where it has several."""
    return f"{task}_{variant}" if len(VARIANTS[task]) > 1 else task
