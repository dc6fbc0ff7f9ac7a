"""Input files as they come: other encodings, byte order marks, CSV the parser gives up on, keys
with control characters. Each becomes a bad line with its number, and never a wrong item."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest

from codemode.batch import BadLine, BatchError, BatchOptions, Item, SqliteJobStore, prepare_job, read_items
from codemode.batch._inputs import InputDigest


def _read(path: Path, key: str | None = "id") -> tuple[list[Item], list[BadLine]]:
    found = list(read_items(path, key))
    return [e for e in found if isinstance(e, Item)], [e for e in found if isinstance(e, BadLine)]


def _prepare(
    tmp_path: Path, inputs: Path, *, strict: bool = False
) -> tuple[SqliteJobStore, list[dict[str, object]]]:
    store = SqliteJobStore(tmp_path / "jobs.db")
    job = prepare_job(store, "INPUT", inputs, BatchOptions(job_id="j", key="id", strict=strict))
    return store, job.bad_lines


# -- not UTF-8 -----------------------------------------------------------------------------------


def test_a_jsonl_line_in_another_encoding_is_bad_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b", "name": "Jos\xe9"}\n{"id": "c"}\n')
    items, bad = _read(path)
    assert [i.key for i in items] == ["a", "c"]
    assert [b.line for b in bad] == [2]
    assert bad[0].reason.startswith("not valid UTF-8")
    assert "0xE9" in bad[0].reason


def test_an_escaped_lone_surrogate_in_jsonl_is_bad(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"id": "a", "v": "\\ud83d\\ude00"}\n{"id": "b\\ud800"}\n'
        '{"id": "c", "v": ["\\udce9"]}\n{"id": "d"}\n',
        encoding="utf-8",
    )
    items, bad = _read(path)
    assert [i.key for i in items] == ["a", "d"]  # a full surrogate pair is one character: fine
    assert items[0].data["v"] == "\U0001f600"
    assert [b.line for b in bad] == [2, 3]
    assert all(b.reason.startswith("not valid UTF-8") and "surrogate" in b.reason for b in bad)


def test_a_csv_row_in_another_encoding_is_bad_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,customer\na,CUST-0001\nb,CUST-\xff02\nc,CUST-0003\n")
    items, bad = _read(path)
    assert [i.key for i in items] == ["a", "c"]
    assert [b.line for b in bad] == [3]
    assert bad[0].reason.startswith("not valid UTF-8") and "0xFF" in bad[0].reason


def test_a_csv_header_in_another_encoding_stops_the_file(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,n\xe9me\na,1\nb,2\n")
    items, bad = _read(path)
    assert items == []
    assert [b.line for b in bad] == [1, 2]
    assert bad[0].reason.startswith("the header is not valid UTF-8")
    assert "lines 2 to 3" in bad[1].reason


def test_a_job_with_non_utf8_lines_registers_the_others(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b\xe9"}\n{"id": "c\\udce9"}\n{"id": "d"}\n')
    store, bad_lines = _prepare(tmp_path, path)
    assert [(b["line"], str(b["reason"])[:15]) for b in bad_lines] == [
        (2, "not valid UTF-8"),
        (3, "not valid UTF-8"),
    ]
    assert [i.key for i in store.items("j")] == ["a", "d"]
    store.close()


def test_an_api_item_holding_a_lone_surrogate_is_bad(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    items = [{"id": "a"}, {"id": "b", "v": {"k\udce9": 1}}, {"id": "c\ud800"}]
    job = prepare_job(store, "INPUT", items, BatchOptions(job_id="j", key="id"))
    assert [(b["line"], str(b["reason"])[:15]) for b in job.bad_lines] == [
        (2, "not valid UTF-8"),
        (3, "not valid UTF-8"),
    ]
    assert [i.key for i in store.items("j")] == ["a"]
    store.close()


# -- CSV the parser gives up on ------------------------------------------------------------------


def test_after_a_csv_error_the_rest_of_the_file_never_becomes_items(tmp_path: Path) -> None:
    # A quoted field over the csv module's size limit, spanning lines that look like rows.
    big = "x" * (csv.field_size_limit() + 10)
    path = tmp_path / "in.csv"
    path.write_text(
        f'id,customer\na,CUST-0001\nb,"{big}\nphantom1,CUST-0009\nphantom2,CUST-0009"\nc,CUST-0003\n',
        encoding="utf-8",
    )
    items, bad = _read(path)
    assert [i.key for i in items] == ["a"]
    assert [b.line for b in bad] == [3, 4]
    assert bad[0].reason.startswith("not valid CSV (field larger than field limit")
    assert "lines 4 to 6 were not read" in bad[1].reason


def test_a_quote_error_on_one_line_does_not_let_a_later_line_run(tmp_path: Path) -> None:
    # The parser drops the rest of line 3, which opens a quoted field: line 4 is inside it.
    path = tmp_path / "in.csv"
    path.write_text('id,v\na,1\nb,"x"y,"z\nphantom,1"\n', encoding="utf-8")
    items, bad = _read(path)
    assert [i.key for i in items] == ["a"]
    assert [b.line for b in bad] == [3, 4]
    assert "lines 4 to 4" not in bad[1].reason and "line 4 was not read" in bad[1].reason


def test_a_csv_error_is_reported_at_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,v\na,1\nb,"x"y\n', encoding="utf-8")
    _, bad = _read(path)
    assert [b.line for b in bad] == [3]  # the csv.DictReader said 2: the row before


def test_a_csv_error_inside_a_multi_line_record_names_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,v\na,1\nb,"one\ntwo\nthree"x\nc,3\n', encoding="utf-8")
    items, bad = _read(path)
    assert [i.key for i in items] == ["a"]
    assert [b.line for b in bad] == [5, 6]
    assert "in the record that starts at line 3" in bad[0].reason


def test_a_csv_error_at_the_last_line_adds_no_unread_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,v\na,1\nb,"x"y', encoding="utf-8")
    _, bad = _read(path)
    assert [b.line for b in bad] == [3]


def test_the_digest_still_covers_the_whole_file_after_a_csv_error(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b'\xef\xbb\xbfid,v\na,1\nb,"x"y\nc,\xe9\n')
    digest = InputDigest()
    list(read_items(path, "id", digest))
    assert digest.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()


def test_strict_stops_at_the_csv_error(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,v\na,1\nb,"x"y\nc,3\n', encoding="utf-8")
    with pytest.raises(BatchError, match=r"input line 3: not valid CSV"):
        _prepare(tmp_path, path, strict=True)


# -- keys with control characters ----------------------------------------------------------------


@pytest.mark.parametrize("char", ["\x00", "\x01", "\t", "\n", "\x1f", "\x7f", "\x85", "\x9f"])
def test_a_key_with_a_control_character_is_bad(tmp_path: Path, char: str) -> None:
    store = SqliteJobStore(tmp_path / "jobs.db")
    job = prepare_job(store, "INPUT", [{"id": f"a{char}b"}, {"id": "c"}], BatchOptions(job_id="j", key="id"))
    [bad] = job.bad_lines
    assert bad["line"] == 1
    assert f"U+{ord(char):04X}" in str(bad["reason"]) and "control character" in str(bad["reason"])
    assert [i.key for i in store.items("j")] == ["c"]
    store.close()


def test_nul_in_a_jsonl_key_is_bad_but_nul_in_data_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a\\u0000"}\n{"id": "b", "v": "x\\u0000y"}\n', encoding="utf-8")
    items, bad = _read(path)
    assert items == [Item("b", 2, {"id": "b", "v": "x\x00y"})]
    assert [b.line for b in bad] == [1]
    assert "U+0000" in bad[0].reason


def test_a_control_character_in_a_csv_key_is_bad(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,v\na\x00,1\nb,\x00\n")
    items, bad = _read(path)
    assert [i.key for i in items] == ["b"]
    assert [b.line for b in bad] == [2]


# -- byte order marks ----------------------------------------------------------------------------


def test_a_bom_at_the_start_of_a_csv_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"\xef\xbb\xbfid,customer\nbom1,CUST-0001\nbom2,CUST-0002\n")
    items, bad = _read(path)
    assert bad == []
    assert items == [
        Item("bom1", 2, {"id": "bom1", "customer": "CUST-0001"}),
        Item("bom2", 3, {"id": "bom2", "customer": "CUST-0002"}),
    ]


def test_a_bom_at_the_start_of_a_jsonl_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a"}\n{"id": "b"}\n')
    items, bad = _read(path)
    assert bad == []
    assert [i.key for i in items] == ["a", "b"]


def test_only_a_leading_bom_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,v\na,\xef\xbb\xbfx\n")
    items, _ = _read(path)
    assert items[0].data == {"id": "a", "v": "\ufeffx"}


def test_a_bom_file_keeps_its_digest(tmp_path: Path) -> None:
    # The digest is of the raw bytes, BOM included, as before: a job started earlier resumes.
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a"}\n{"id": "b\xe9"}\n')
    digest = InputDigest()
    list(read_items(path, "id", digest))
    assert digest.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
