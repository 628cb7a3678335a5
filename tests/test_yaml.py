"""User YAML (expectations, pipelines) is read within bounds: aliases as they expand, numbers, file kinds and sizes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daydream._yaml import MAX_BYTES, MAX_NODES, load_yaml, read_yaml_file
from daydream.errors import InputError


def _bomb(levels: int) -> str:
    """`levels` anchors of ten aliases each over a list of ten: the last stands for 10**(levels + 1) values."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nname: *a{levels}\n"


def test_an_alias_bomb_under_the_alias_cap_is_refused_by_its_expanded_size() -> None:
    assert 10 ** 6 > MAX_NODES  # five levels: 50 aliases, a million values
    with pytest.raises(InputError, match="once its aliases are expanded") as caught:
        load_yaml(_bomb(5), "bomb.yaml")
    assert str(caught.value).startswith("bomb.yaml: ")


def test_aliases_that_expand_to_a_small_document_still_load() -> None:
    document = load_yaml(_bomb(2), "small.yaml")  # 1,000 values through 20 aliases
    assert len(document["name"]) == 10 and len(document["name"][0]) == 10 and document["name"][0][0] == ["x"] * 10


@pytest.mark.parametrize(("text", "message"), [
    ("factor: 1.0e+999\n", r"1\.0e\+999 is not a finite number"),
    ("factor: .inf\n", "not a finite number"),
    ("factor: -.inf\n", "not a finite number"),
    ("factor: .nan\n", "not a finite number"),
    ("factor: 1" + "0" * 400 + "\n", "is out of range"),
])
def test_numbers_outside_a_finite_64_bit_range_are_refused_with_their_line(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        load_yaml("name: x\n" + text, "p.yaml")
    assert "line 2" in str(caught.value)


def test_numbers_inside_the_range_load() -> None:
    assert load_yaml("a: 9223372036854775807\nb: 1.5e+300\nc: -0.25\nd: 1e-3\ne: 2E6\nf: '1e3'\n", "ok.yaml") == \
        {"a": 2**63 - 1, "b": 1.5e300, "c": -0.25, "d": 0.001, "e": 2e6, "f": "1e3"}


def test_only_a_regular_file_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would wait for a writer: it must be refused before any open
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(InputError, match="not a regular file") as caught:
            read_yaml_file(path, "a YAML optimization")
        assert str(caught.value).startswith(f"{path}: ")
    with pytest.raises(InputError, match="is a folder"):
        read_yaml_file(tmp_path, "a YAML optimization")
    with pytest.raises(InputError, match="no such file"):
        read_yaml_file(tmp_path / "missing.yaml", "a YAML optimization")


def test_a_large_or_binary_file_is_refused_before_parsing(tmp_path: Path) -> None:
    large = tmp_path / "large.yaml"
    large.write_text("k: v\n" * (MAX_BYTES // 5 + 1))
    with pytest.raises(InputError, match="too large for a YAML file"):
        read_yaml_file(large, "an expectations file")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_yaml_file(binary, "an expectations file")
    exact = tmp_path / "exact.yaml"
    exact.write_text("name: x\n")
    assert read_yaml_file(exact, "an expectations file") == "name: x\n"
