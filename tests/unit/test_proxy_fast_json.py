"""fast_json reads every body exactly as json.loads does (msgspec first, json for what only it accepts), and
writes JSON that reads back to the same values."""

import json
import math

import pytest

from harness_rl.proxy import fast_json

LENIENT_OR_ODD = [
    b'{"a": 1, "b": [true, false, null], "c": "\\u00e9\\ud83d\\ude00", "d": 1e-7}',
    b'{"a": 1, "a": 2}',  # duplicate keys: the last wins
    b"[123456789012345678901234567890, -0.0, 5e-324]",
    b'{"t": NaN, "u": -Infinity}',  # Python's json only
    b"[1e400]",  # out of float range: json reads inf
    b'"\\ud800 lone surrogate"',
    "\ufeff[1]".encode("utf-8"),  # BOM
    '{"x": "é"}'.encode("utf-16"),
    b"  [1, 2]  ",
]


@pytest.mark.parametrize("raw", LENIENT_OR_ODD)
def test_loads_matches_json(raw):
    expected, got = json.loads(raw), fast_json.loads(raw)
    assert repr(got) == repr(expected)  # repr: NaN != NaN, and -0.0 == 0.0


@pytest.mark.parametrize("raw", [b"", b"{", b"[1,]", b"\xff\xfe\xfd", b'{"a" 1}'])
def test_malformed_is_a_value_error(raw):
    with pytest.raises(ValueError):
        fast_json.loads(raw)


def test_deep_nesting_is_a_recursion_error():
    with pytest.raises(RecursionError):
        fast_json.loads(b"[" * 100_000)


def test_dumps_round_trips():
    value = {"s": "é😀\u2028", "i": [0, -1, 2**70], "f": [0.1, 1e22, -1e-7], "n": None, "b": [True, False], "e": {}}
    assert json.loads(fast_json.dumps(value)) == value
    assert b" " not in fast_json.dumps({"a": [1, 2]})  # compact
    assert json.loads(fast_json.dumps({"x": math.inf})) == {"x": None}  # never invalid JSON
