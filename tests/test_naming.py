"""The reversible folder-name encoding: round trips, and nothing escapes the root."""
from __future__ import annotations

import pytest

from destination.errors import BadRequest
from destination.table_store.layout import table_prefix
from destination.table_store.naming import decode_name, encode_name


@pytest.mark.parametrize("name", ["plain_name-1", "with space", "dots.in.name", 'quo"te', "ünïcødé_表", "..", "a/b",
                                  "nul\x00byte", "k=v", "~tilde", "~41", "%20", "_latest", "UPPER lower"])
def test_round_trip(name: str) -> None:
    assert decode_name(encode_name(name)) == name


def test_safe_characters_are_kept_and_others_escaped() -> None:
    assert encode_name("Abc_12-x") == "Abc_12-x"
    assert encode_name("my table.v2") == "my~20table~2Ev2"
    assert encode_name("ünï") == "ünï"


@pytest.mark.parametrize("name", ["..", ".", "../../etc", "a/../../b", "\x00", "k=v"])
def test_no_name_reaches_outside_or_forms_partitions(name: str) -> None:
    folder = encode_name(name)
    assert "/" not in folder and "\x00" not in folder and "=" not in folder
    assert folder not in (".", "..") and not folder.startswith(".")
    assert table_prefix(name, name).count("/") == 1


def test_empty_name_rejected() -> None:
    with pytest.raises(BadRequest):
        encode_name("")
