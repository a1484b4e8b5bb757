"""Mooncake-format request traces become one-stage programs at the trace's times."""

import json

import pytest

from hetflow.core.trace import prompt_parts
from hetflow.workloads.mooncake import read_mooncake
from tests.factories import block_hashes_of


def write(tmp_path, rows):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_requests_become_single_stage_programs(tmp_path):
    path = write(tmp_path, [{"timestamp": 1000, "input_length": 300, "output_length": 20, "hash_ids": [1, 2]},
                            {"timestamp": 3500, "input_length": 50, "output_length": 7, "hash_ids": [3]}])
    records = read_mooncake(path, ["a", "b"])
    assert [r.arrival_s for r in records] == [0.0, 2.5]
    assert records[0].input_tokens == {"a": 300, "b": 300} and records[1].output_tokens == {"a": 7, "b": 7}
    assert all(r.stage_count == 1 and not r.depends_on and r.correct == {} for r in records)


def test_hash_ids_become_shared_blocks(tmp_path):
    path = write(tmp_path, [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
                            {"timestamp": 1, "input_length": 700, "output_length": 5, "hash_ids": [0, 7]},
                            {"timestamp": 2, "input_length": 600, "output_length": 5}])
    records = read_mooncake(path, ["a"])
    blocks = [block_hashes_of(prompt_parts([r], r, {}), 16) for r in records]
    assert [sum(p["tokens"] for p in r.prompt_parts) for r in records] == [1100, 700, 600]
    assert blocks[0][:32] == blocks[1][:32] and blocks[0][32] != blocks[1][32]   # id 0: 512 tokens, 32 blocks
    assert not set(blocks[2]) & set(blocks[0])                                    # no ids: nothing shared


@pytest.mark.parametrize("row, match", [({"timestamp": 0, "input_length": 5}, "missing output_length"),
                                        ({"timestamp": 0, "input_length": 0, "output_length": 5}, ">= 1")])
def test_bad_rows_are_named(tmp_path, row, match):
    with pytest.raises(ValueError, match=match):
        read_mooncake(write(tmp_path, [row]), ["a"])
