"""Loading a GGUF file reads it once: within ``ctxbench.model.load._gguf_loading`` transformers' calls
share one ``gguf.GGUFReader`` per file (it built one per call: four per load, each parsing the whole
header again) and one tensor-name map per architecture (it built one per module), and what they read
is what a reader of its own reads. That ctxbench's weights are plain transformers' own, to the bit, is
held on the real default model (tests/model/test_real_model.py)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from ctxbench.model.load import _gguf_loading


@pytest.fixture
def small_gguf(tmp_path):
    """A GGUF file with a llama architecture's keys and one tensor, written by the gguf package."""
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(4)
    writer.add_rope_freq_base(10000.0)
    writer.add_tensor("token_embd.weight", np.arange(32 * 32, dtype=np.float32).reshape(32, 32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class CountingReader(gguf.GGUFReader):
    built = 0

    def __init__(self, *args, **kwargs):
        type(self).built += 1
        super().__init__(*args, **kwargs)


def test_transformers_calls_build_one_reader_per_file(small_gguf, monkeypatch):
    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    CountingReader.built = 0
    with _gguf_loading():
        first = load_gguf_checkpoint(str(small_gguf))
        again = load_gguf_checkpoint(str(small_gguf))
    assert CountingReader.built == 1
    assert first == again
    load_gguf_checkpoint(str(small_gguf))  # outside: transformers' own way again, a reader per call
    assert CountingReader.built == 2


def test_the_shared_reader_reads_what_a_reader_of_its_own_reads(small_gguf):
    plain = gguf.GGUFReader(str(small_gguf))
    with _gguf_loading():
        shared = gguf.GGUFReader(str(small_gguf))
        assert gguf.GGUFReader(str(small_gguf)) is shared
    assert list(shared.fields) == list(plain.fields)
    for name, field in plain.fields.items():
        assert shared.fields[name].contents() == field.contents(), name
    assert [t.name for t in shared.tensors] == [t.name for t in plain.tensors]
    np.testing.assert_array_equal(shared.tensors[0].data, plain.tensors[0].data)


def test_the_tensor_name_map_is_built_once_per_architecture_and_is_the_same_map(monkeypatch):
    calls = []
    plain = gguf.get_tensor_name_map

    def counted(arch, n_blocks):
        calls.append((arch, n_blocks))
        return plain(arch, n_blocks)

    monkeypatch.setattr(gguf, "get_tensor_name_map", counted)
    with _gguf_loading():
        maps = [gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) for _ in range(3)]
    assert calls == [(gguf.MODEL_ARCH.LLAMA, 30)]
    assert maps[0] is maps[1] is maps[2]
    own = plain(gguf.MODEL_ARCH.LLAMA, 30)
    assert own.mapping == maps[0].mapping
    assert gguf.get_tensor_name_map is counted  # outside the load, gguf's own function again


def test_outside_a_load_gguf_is_left_as_it_was():
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_loading():
        assert gguf.GGUFReader is not reader and gguf.get_tensor_name_map is not name_map
    assert gguf.GGUFReader is reader and gguf.get_tensor_name_map is name_map
