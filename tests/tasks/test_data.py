"""Documents: built-in corpus, local formats, selection and the token cache."""

from __future__ import annotations

import json
import sysconfig

import pandas as pd
import pytest

from ctxbench.errors import UserError
from ctxbench.tasks.corpus import Tokenized, load_corpus, stdlib_corpus


def test_builtin_corpus_is_the_stdlib_without_tests_or_site_packages():
    corpus = stdlib_corpus()
    assert corpus.names == tuple(sorted(corpus.names))
    assert all(n.endswith(".py") for n in corpus.names)
    assert not any(part in ("test", "tests", "site-packages", "idle_test") for n in corpus.names for part in n.split("/"))
    root = sysconfig.get_paths()["stdlib"]
    with open(f"{root}/{corpus.names[0]}", encoding="utf-8") as f:
        assert corpus.texts[0] == f.read()
    assert stdlib_corpus().digest == corpus.digest


def test_jsonl_and_parquet_give_one_document_per_record(tmp_path):
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps({"body": f"text {i}"}) for i in range(3)) + "\n")
    pd.DataFrame({"body": ["one", "two"]}).to_parquet(tmp_path / "d.parquet")
    assert load_corpus(str(tmp_path / "d.jsonl"), text_column="body").texts == ("text 0", "text 1", "text 2")
    assert load_corpus(str(tmp_path / "d.parquet"), text_column="body").texts == ("one", "two")


def test_directory_reads_every_document_in_path_order(corpus_dir):
    corpus = load_corpus(str(corpus_dir))
    assert corpus.names == ("a.txt", "b.txt", "c.txt")


def test_digest_changes_with_the_text(corpus_dir):
    before = load_corpus(str(corpus_dir)).digest
    (corpus_dir / "c.txt").write_text("changed")
    assert load_corpus(str(corpus_dir)).digest != before


@pytest.mark.parametrize("name,message", [("missing.txt", "not found"), ("empty.txt", "empty")])
def test_bad_local_dataset_is_a_user_error(tmp_path, name, message):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(UserError, match=message):
        load_corpus(str(tmp_path / name))


def test_selection_uses_the_same_documents_at_every_length(corpus_dir, tokenizer):
    tokens = Tokenized(load_corpus(str(corpus_dir)), tokenizer, cache_dir=corpus_dir.parent / "cache")
    chosen = tokens.select([50, 200], docs=5)
    assert chosen == {50: [0, 1], 200: [0, 1]}  # c.txt (120 tokens) is shorter than 200


def test_token_cache_round_trips(corpus_dir, tokenizer, tmp_path):
    first = Tokenized(load_corpus(str(corpus_dir)), tokenizer, cache_dir=tmp_path)
    first.select([100], docs=3)
    again = Tokenized(load_corpus(str(corpus_dir)), tokenizer, cache_dir=tmp_path)
    assert set(again.ids) == {0, 1, 2} and all((again.ids[i] == first.ids[i]).all() for i in again.ids)
