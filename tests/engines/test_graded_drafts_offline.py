"""The offline accept length that chooses the graded draft models' noise scales
(scripts/make_tiny_models.py chain_accept_length): draft-model speculation under greedy,
walked over a match vector. Pure Python: no torch, no venv, no models."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support import ROOT


def load_script():
    spec = importlib.util.spec_from_file_location("make_tiny_models", ROOT / "scripts" / "make_tiny_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = load_script()
walk = script.chain_accept_length


def test_a_made_up_match_vector_walks_as_a_server_drafts():
    # k = 3: [1 1 1] accepted + bonus (4 tokens) | [0] miss (1) | [1 0] one accepted (2) | [0] (1)
    assert walk([1, 1, 1, 1, 0, 1, 0, 0], 3) == (8, 4)
    # the bonus token's own match is never looked at: position 3 is the target's, not a draft
    assert walk([1, 1, 1, 0, 1, 1, 1, 0], 3) == (8, 2)
    # k = 2 caps each cycle at 2 accepted
    assert walk([1, 1, 1, 1, 1, 1], 2) == (6, 2)


@pytest.mark.parametrize("matches, k, expected", [
    ([], 3, (0, 0)),                 # nothing to walk
    ([0, 0, 0, 0], 3, (4, 4)),       # every draft rejected: accept length 1
    ([1] * 12, 3, (12, 3)),          # every draft accepted: k + 1 per cycle
    ([1, 1], 3, (3, 1)),             # the end cuts the chain: the cycle still yields accepted + 1
    ([1, 0, 1, 1, 1, 1, 0], 1, (7, 4)),  # k = 1: 2 | 2 | 2 | 1
])
def test_edges(matches, k, expected):
    assert walk(matches, k) == expected


def test_k_below_one_is_refused():
    with pytest.raises(ValueError, match="k must be >= 1"):
        walk([1, 0], 0)


def test_the_family_is_named_by_its_target_accept_lengths():
    assert script.GRADED_NAMES == tuple(f"draft_graded_{n}" for n in (15, 20, 25, 30, 35))
    assert set(script.GRADED_NAMES) <= set(script.MODEL_NAMES)
    assert script.GRADED_K == 3
