"""JSON on the proxy's per-call paths, through msgspec (installed with vLLM; C, no Python objects on the way).

Per call the proxy parses the client's whole conversation (tens of KB), serializes it again for the engine and
parses the engine's reply (thousands of prompt token ids); at 144 concurrent sessions the json module's share
of that was over a tenth of the proxy's CPU, and msgspec does the same in a fraction of it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of a value made of dicts, lists, strings, numbers, booleans and None.

    Unlike json.dumps it writes NaN and infinities as null; the codecs refuse them in client bodies first.
    """
    return _ENCODER.encode(value)


def loads(data: bytes) -> Any:
    """Parses JSON exactly as json.loads does.

    What msgspec refuses and Python's json module reads (NaN and Infinity, numbers out of float range, lone
    surrogate escapes, UTF-16/32 or BOM-prefixed bytes) is read by json.loads, so a client body gets the same
    leniency, and the same checks afterwards (dialects/wire_json.py), as before.

    Raises:
        ValueError: if it is not JSON (UnicodeDecodeError included).
        RecursionError: if it nests deeper than the parser's recursion limit.
    """
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)
