"""The repeated blocks that checkpoint, offload, depth and width choose when no layers= is given, on hand-made
module paths (the parameter bytes per path made up, the blocks worked out by hand)."""

from __future__ import annotations

import pytest

from daydream.errors import InputError
from daydream.mapping.attribution import NO_VALUE, blocks_of, choose_layers, layers_chosen

# A ViT built on nn.TransformerEncoder: its blocks are `encoder.layers.N`, not `blocks.N`.
VIT = ["ViT", "ViT.patch", "ViT.encoder", "ViT.encoder.layers.0", "ViT.encoder.layers.0.attn",
       "ViT.encoder.layers.1", "ViT.encoder.layers.1.attn", "ViT.head"]
VIT_BYTES = {"ViT.patch": 10, "ViT.encoder.layers.0.attn": 4, "ViT.encoder.layers.1.attn": 4, "ViT.head": 7}


def test_the_default_chooses_the_outermost_numbered_modules_with_parameters() -> None:
    assert blocks_of(VIT, VIT_BYTES) == ["ViT.encoder.layers.0", "ViT.encoder.layers.1"]
    targets, owner = layers_chosen(VIT, "", VIT_BYTES)
    assert targets == [3, 5]
    # each layer's owner: the block it is in (itself, or its ancestor), none for the rest; one more slot, none
    assert owner.tolist() == [NO_VALUE, NO_VALUE, NO_VALUE, 3, 3, 5, 5, NO_VALUE, NO_VALUE]


def test_numbered_modules_without_parameters_are_not_blocks_where_the_trace_records_parameters() -> None:
    # nn.Sequential(Linear, ReLU, Linear): the ReLU (no parameters) is no block
    layers = ["M", "M.net", "M.net.0", "M.net.1", "M.net.2"]
    assert blocks_of(layers, {"M.net.0": 8, "M.net.1": 0, "M.net.2": 8}) == ["M.net.0", "M.net.2"]
    # without parameter sizes every numbered module is one
    assert blocks_of(layers, {}) == ["M.net.0", "M.net.1", "M.net.2"]


def test_a_regex_still_chooses_what_it_matches() -> None:
    targets, _, said = choose_layers(VIT, r"head$", VIT_BYTES, "checkpoint")
    assert targets == [7] and said == "matching 'head$'"
    targets, _, said = choose_layers(VIT, "", VIT_BYTES, "checkpoint")
    assert targets == [3, 5] and said == "of the repeated blocks (ViT.encoder.layers.0, ViT.encoder.layers.1)"


def test_a_regex_that_matches_nothing_names_the_blocks_the_default_would_take() -> None:
    with pytest.raises(InputError, match=r"layers=blocks\\\.\\d\+\$: no layer matches; the trace's repeated blocks are "
                                         r"ViT\.encoder\.layers\.0, ViT\.encoder\.layers\.1: leave layers= out"):
        choose_layers(VIT, r"blocks\.\d+$", VIT_BYTES, "checkpoint")


def test_a_model_without_repeated_blocks_asks_for_a_regex() -> None:
    layers = ["LM", "LM.emb", "LM.rnn", "LM.out"]
    with pytest.raises(InputError, match="--opt depth: the trace's layers hold no repeated blocks"):
        choose_layers(layers, "", {"LM.emb": 4, "LM.rnn": 4, "LM.out": 4}, "depth")
    with pytest.raises(InputError, match="no layer matches; see the layers in daydream inspect"):
        choose_layers(layers, "blocks", {}, "depth")


def test_a_trace_without_layers_says_how_to_record_them() -> None:
    with pytest.raises(InputError, match="--opt width: the trace names no layers .* record it with daydream trace"):
        choose_layers([], "", {}, "width")
    with pytest.raises(InputError, match="the trace names no layers"):
        choose_layers([], "blocks", {}, "width")
