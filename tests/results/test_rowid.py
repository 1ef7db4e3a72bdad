"""A row id (`FILE@KEY`) names the same row however the file is rewritten; `FILE:N` is its place."""

from __future__ import annotations

import pytest
from helpers import RESULTS

from ctxbench.errors import UserError
from ctxbench.results.rowid import find, numbered, split
from ctxbench.results.store import read_records, write_records


def test_a_row_keeps_its_id_when_the_file_is_rewritten_in_another_order(tmp_path):
    rows = read_records(RESULTS / "ruler-smollm2-2k4k-realdata.csv")
    path = tmp_path / "a.csv"
    write_records(path, rows)
    ids = numbered(str(path))
    assert len({i for i, _ in ids}) == len(rows)  # one id per row
    write_records(path, rows[::-1])  # a cell rerun moves its rows to the end; a merge interleaves
    for rid, row in ids:
        assert find(rid) == row
    assert find(f"{path}:1") == rows[-1]  # the number is the place, which moved


@pytest.mark.parametrize("text", ["a.csv", "a.csv:0", "a.csv:x", "a.csv@12ab", ":3", "@0123456789ab"])
def test_what_is_no_row_id_is_refused(text):
    with pytest.raises(UserError, match="is not a row id"):
        split(text)
