"""The reversible folder-name encoding: round trips, and nothing escapes the root."""
from __future__ import annotations

import pytest

from destination.on_disk.layout import table_prefix
from destination.on_disk.naming import MAX_FOLDER_BYTES, NAME_OBJECT, decode_name, encode_name, is_shortened
from destination.runtime.errors import BadRequest


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


LONG_NAMES = ["x" * 1000, "名" * 300, "a b." * 250, "~" * 300]


@pytest.mark.parametrize("name", LONG_NAMES)
def test_long_names_fit_one_path_component(name: str) -> None:
    folder = encode_name(name)
    assert len(folder.encode("utf-8")) <= MAX_FOLDER_BYTES and is_shortened(folder)
    assert encode_name(name) == folder  # the same folder every time
    assert "/" not in folder and not folder.startswith((".", "_")) and folder != NAME_OBJECT


def test_long_names_sharing_their_head_get_different_folders() -> None:
    assert encode_name("x" * 1000) != encode_name("x" * 999 + "y")


def test_names_that_fit_keep_their_folder() -> None:
    fits = "名" * 85  # 255 bytes: the longest folder a local filesystem holds
    assert encode_name(fits) == fits and not is_shortened(fits)
    assert not is_shortened(encode_name("my table.v2")) and not is_shortened(encode_name("~" * 85))
