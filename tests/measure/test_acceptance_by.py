"""Acceptance where it changes: accept length per input-length bucket and per turn, from the
requests' verify counts or, without them, the stream's tokens per decode chunk."""

from __future__ import annotations

import pytest

from harness.load import RequestRecord
from harness.measure.acceptance import acceptance_by, combine_acceptance_by, input_length_bucket
from harness.report.tables import acceptance_rows


def request(prompt: int, tokens: int, verify: int | None = None, turn: int = 0, chunks: list[int] | None = None):
    return RequestRecord(index=0, warmup=False, turn=turn, prompt_tokens=prompt, completion_tokens=tokens,
                         spec_verify_ct=verify, chunk_tokens=chunks or [], status=200, end_time=1.0)


@pytest.mark.parametrize("tokens, bucket", [(None, None), (0, "0-127"), (127, "0-127"), (128, "128-255"),
                                            (255, "128-255"), (256, "256-511"), (1500, "1024-2047")])
def test_buckets_are_powers_of_two_of_the_prompt(tokens, bucket):
    assert input_length_bucket(tokens) == bucket


def test_each_bucket_and_turn_has_its_own_token_weighted_accept_length():
    records = [request(100, 30, 10), request(120, 10, 10), request(300, 40, 40, turn=1), request(600, 20, 20, turn=1)]
    found = acceptance_by(records)
    short = found["input_length"]["0-127"]
    assert (short["requests"], short["accept_length"], short["accept_length_source"]) == (2, 2.0, "requests")
    assert short["prompt_tokens_mean"] == 110.0
    assert list(found["input_length"]) == ["0-127", "256-511", "512-1023"]  # in order of length, empty ones absent
    assert found["input_length"]["256-511"]["accept_length"] == 1.0
    assert found["turn"]["1"]["accept_length"] == 2.0 and found["turn"]["2"]["accept_length"] == 1.0


def test_without_verify_counts_the_stream_gives_the_accept_length_and_says_so():
    # whole steps (between the prefill's chunk and a last one max_tokens cut short): 2+2 over 2,
    # then 3+1+2 over 3: 10 tokens in 5 chunks
    found = acceptance_by([request(50, 6, chunks=[1, 2, 2, 1]), request(60, 8, chunks=[1, 3, 1, 2, 1])])
    group = found["input_length"]["0-127"]
    assert (group["accept_length"], group["accept_length_source"]) == (2.0, "stream")
    plain = acceptance_by([request(50, 4, chunks=[4])])["input_length"]["0-127"]
    assert plain["accept_length"] is None  # one chunk: no decode step seen
    short = acceptance_by([request(50, 5, chunks=[1, 4])])["input_length"]["0-127"]
    assert short["accept_length"] is None  # a prefill chunk and a last one: no whole step seen


def test_repeats_sum_counts_and_take_the_median_accept_length():
    runs = [acceptance_by([request(100, 30, 10)]), acceptance_by([request(100, 20, 10)]),
            acceptance_by([request(100, 10, 10), request(200, 10, 5)])]
    combined = combine_acceptance_by(runs)
    assert combined["input_length"]["0-127"]["requests"] == 3
    assert combined["input_length"]["0-127"]["accept_length"] == 2.0  # median of 3.0, 2.0, 1.0
    assert combined["input_length"]["128-255"]["accept_length"] == 2.0


def test_tables_show_a_dimension_only_where_it_varies():
    varied = {"eagle3": {"accept_length": 2.0, "acceptance_by": acceptance_by([request(100, 30, 10), request(300, 10, 10)])},
              "plain": {"accept_length": None,
                        "acceptance_by": acceptance_by([request(100, 30, chunks=[1] * 30), request(300, 10, chunks=[1] * 10)])}}
    rows = acceptance_rows(varied, ["plain", "eagle3"], "input_length")
    assert rows == [["eagle3", "0-127", "1", "100", "3.00"], ["eagle3", "256-511", "1", "300", "1.00"]]
    assert acceptance_rows(varied, ["plain", "eagle3"], "turn") == []  # one turn: nothing the arm's figure hides
