"""RULER qa under ``--doc-count ruler`` (the default): the prompts' text equals what NVIDIA/RULER's
``scripts/data/synthetic/qa.py`` (c3f5e3b) writes for the same data, seed and length, sample by
sample. The reference below is a copy of its readers, ``generate_input_output`` and
``generate_samples`` (module globals made parameters, logging dropped; its global ``random`` kept,
seeded as its ``random.seed(args.random_seed)``), counting tokens as ctxbench does."""

from __future__ import annotations

import json
import random

import pytest
from helpers import DATA, byte_tokenizer, run_settings

from ctxbench.methods import resolve
from ctxbench.results.identity import complete_options
from ctxbench.runner.settings import build_settings
from ctxbench.synthetic.pieces import frame
from ctxbench.synthetic.qa import RulerStream, load_qa
from ctxbench.tasks import get, registry

FILES = {"qa_1": DATA / "qa" / "squad-dev-v2.0-mini.json", "qa_2": DATA / "qa" / "hotpot-dev-distractor-mini.json"}
# scripts/data/synthetic/constants.py TASKS['qa'] template + answer_prefix, as prepare.py passes it
TEMPLATE = ("Answer the question based on the given documents. Only give me the answer and do not output any other words.\n\n"
            "The following are given documents.\n\n{context}\n\nAnswer the question based on the given documents. Only give me "
            "the answer and do not output any other words.\n\nQuestion: {query} Answer:")  # fmt: skip


# --- NVIDIA/RULER scripts/data/synthetic/qa.py (c3f5e3b), copied ---------------------------------

def read_squad(file):
    with open(file) as f:
        data = json.load(f)

    total_docs = [p['context'] for d in data['data'] for p in d['paragraphs']]
    total_docs = sorted(list(set(total_docs)))
    total_docs_dict = {c: idx for idx, c in enumerate(total_docs)}

    total_qas = []
    for d in data['data']:
        more_docs = [total_docs_dict[p['context']] for p in d['paragraphs']]
        for p in d['paragraphs']:
            for qas in p['qas']:
                if not qas['is_impossible']:
                    total_qas.append({
                        'query': qas['question'],
                        'outputs': [a['text'] for a in qas['answers']],
                        'context': [total_docs_dict[p['context']]],
                        'more_context': [idx for idx in more_docs if idx != total_docs_dict[p['context']]]
                    })

    return total_qas, total_docs


def read_hotpotqa(file):
    with open(file) as f:
        data = json.load(f)

    total_docs = [f"{t}\n{''.join(p)}" for d in data for t, p in d['context']]
    total_docs = sorted(list(set(total_docs)))
    total_docs_dict = {c: idx for idx, c in enumerate(total_docs)}

    total_qas = []
    for d in data:
        total_qas.append({
            'query': d['question'],
            'outputs': [d['answer']],
            'context': [total_docs_dict[f"{t}\n{''.join(p)}"] for t, p in d['context']],
        })

    return total_qas, total_docs


DOCUMENT_PROMPT = "Document {i}:\n{document}"


def generate_input_output(QAS, DOCS, random_seed, template, index, num_docs):  # noqa: N803  (RULER's names)
    curr_q = QAS[index]['query']
    curr_a = QAS[index]['outputs']
    curr_docs = QAS[index]['context']
    curr_more = QAS[index].get('more_context', [])
    if num_docs < len(DOCS):
        if (num_docs - len(curr_docs)) > len(curr_more):
            addition_docs = [i for i, d in enumerate(DOCS) if i not in curr_docs + curr_more]
            all_docs = curr_docs + curr_more + random.sample(addition_docs, max(0, num_docs - len(curr_docs) - len(curr_more)))
        else:
            all_docs = curr_docs + random.sample(curr_more, num_docs - len(curr_docs))

        all_docs = [DOCS[idx] for idx in all_docs]
    else:
        # Repeat DOCS as many times as needed and slice to num_docs
        repeats = (num_docs + len(DOCS) - 1) // len(DOCS)  # Ceiling division
        all_docs = (DOCS * repeats)[:num_docs]

    random.Random(random_seed).shuffle(all_docs)

    context = '\n\n'.join([DOCUMENT_PROMPT.format(i=i+1, document=d) for i, d in enumerate(all_docs)])  # noqa: E226
    input_text = template.format(
        context=context,
        query=curr_q
    )
    return input_text, curr_a


def generate_samples(gen, text_to_tokens, num_samples: int, max_seq_length: int, tokens_to_generate=32, incremental: int = 10):
    write_jsons = []

    # Estimate tokens per question to determine reasonable upper bound
    sample_input_text, _ = gen(0, incremental)
    sample_tokens = len(text_to_tokens(sample_input_text))
    tokens_per_doc = sample_tokens / incremental

    estimated_max_docs = int((max_seq_length / tokens_per_doc) * 3)

    lower_bound = incremental
    upper_bound = max(estimated_max_docs, incremental * 2)  # Ensure upper_bound is reasonable

    optimal_num_docs = None

    while lower_bound <= upper_bound:
        mid = (lower_bound + upper_bound) // 2
        input_text, answer = gen(0, mid)
        total_tokens = len(text_to_tokens(input_text)) + tokens_to_generate

        if total_tokens <= max_seq_length:
            optimal_num_docs = mid
            lower_bound = mid + 1
        else:
            upper_bound = mid - 1

    num_docs = optimal_num_docs if optimal_num_docs is not None else incremental

    for index in range(num_samples):
        used_docs = num_docs
        tries = 0  # (not RULER's: a test that cannot end fails instead)
        while(True):
            tries += 1
            assert tries < 1000, f"RULER retries sample {index} forever at {used_docs} documents"
            try:
                input_text, answer = gen(index, used_docs)
                length = len(text_to_tokens(input_text)) + tokens_to_generate
                assert length <= max_seq_length, f"{length} exceeds max_seq_length."
                break
            except Exception:  # RULER: a bare except
                if used_docs > incremental:
                    used_docs -= incremental

        write_jsons.append({"index": index, "input": input_text, "outputs": answer, "length": length})

    return write_jsons

# --------------------------------------------------------------------------------------------------


def ruler_samples(variant: str, tokenizer, length: int, seed: int, samples: int) -> list[dict]:
    qas, docs = (read_squad if variant == "qa_1" else read_hotpotqa)(FILES[variant])
    random.seed(seed)  # qa.py: random.seed(args.random_seed)
    try:
        return generate_samples(lambda index, n: generate_input_output(qas, docs, seed, TEMPLATE, index, n),
                                lambda text: tokenizer(text, add_special_tokens=False)["input_ids"], samples, length)  # fmt: skip
    finally:
        random.seed()


@pytest.mark.parametrize("variant,length", [("qa_1", 3600), ("qa_1", 4200), ("qa_1", 4300), ("qa_1", 6000), ("qa_2", 2000), ("qa_2", 2600), ("qa_2", 4000)])
@pytest.mark.parametrize("seed", [0, 42])
def test_each_trials_prompt_is_rulers_sample(variant, length, seed):
    tok = byte_tokenizer()
    stream = RulerStream(load_qa(variant, str(FILES[variant])), tok, length, seed, frame(tok, False))
    samples = ruler_samples(variant, tok, length, seed, 12)
    for t, sample in enumerate(samples):
        p = stream.prompt(t)
        assert tok.decode(list(p.ids)) == sample["input"], (t, p.extra["docs"])
        assert list(p.answers) == sample["outputs"]


def test_the_cells_count_comes_from_sample_0_and_steps_down_by_10():
    tok = byte_tokenizer()
    stream = RulerStream(load_qa("qa_1", str(FILES["qa_1"])), tok, 4200, 0, frame(tok, False))
    counts = [stream.prompt(t).extra["docs"] for t in range(12)]
    assert all(stream.count - c in (0, 10) for c in counts) and len(set(counts)) == 2, counts


def _settings(**options):
    return build_settings(get("qa"), [resolve("none")], 2.0, "3500", {"qa_data": str(FILES["qa_1"]), **options})


def test_the_task_runs_rulers_prompts_and_every_question_by_default(tiny_lm):
    settings = _settings()
    assert settings.trials == "all" and settings.doc_count == "ruler" and get("qa").items(settings) == {"qa_1": 35}
    ctx = get("qa").prepare(tiny_lm, _settings(trials=3))
    from ctxbench.tasks import qa as module

    tok = tiny_lm.tokenizer
    got = [tok.decode(list(p.ids)) for p in module.prompts_for(tiny_lm, ctx, "qa_1", 3500, 3)]
    assert got == [s["input"] for s in ruler_samples("qa_1", tok, 3500, 0, 3)]
    records = run_settings(tiny_lm, "qa", _settings(trials=2)).records
    assert {json.loads(r["options"])["doc_count"] for r in records} == {"ruler"}


def test_rows_before_the_option_read_as_the_largest_count():
    old = {"task": "qa", "options": '{"chat": true, "protocol": "ruler"}'}
    assert json.loads(complete_options(old, registry(), {})) == {"chat": True, "protocol": "ruler", "doc_count": "largest"}
