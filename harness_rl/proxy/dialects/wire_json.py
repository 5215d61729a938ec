"""What every dialect checks on a parsed JSON body before decoding it: the JSON is something the engine
request can carry.

Python's json module accepts more than JSON: NaN and Infinity, and `\\ud800`-style escapes that decode to
lone surrogates. Both pass decoding and then fail when the proxy serializes the engine request (httpx
encodes with allow_nan=False and UTF-8), which would surface as a 500 long after the bad field. Deep
nesting is refused for the same reason (the codecs and copy.deepcopy recurse). One iterative walk catches
all three up front.
"""

from __future__ import annotations

import math
from typing import Any

from harness_rl.proxy.errors import ProxyError

#: Deepest nesting of objects/arrays accepted. Real requests stay far below it (claude-code's deepest tool
#: schema sits about 12 levels down); it keeps every recursive step of a codec well inside Python's limit.
MAX_NESTING = 100
_REPLACEMENT = "\ufffd"


def well_formed(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD.

    They are not refused: JavaScript harnesses can produce them by cutting a long tool output between the
    two halves of a surrogate pair (JSON.stringify then escapes the lone half), and such a request is
    otherwise fine.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_REPLACEMENT if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def check_json_body(body: Any) -> Any:
    """Validates a parsed request body and returns it with every string well-formed (see `well_formed`),
    edited in place where it can be.

    Raises:
        ProxyError: 400 naming the first value that is NaN/Infinity or nested deeper than MAX_NESTING.
    """
    root = [body]
    if _clean_fast(root):
        return root[0]
    # The careful walk: also rebuilds dicts with non-ASCII keys, and names the first refused value in a
    # stable order. Runs on every request, so it carries depths, not paths (building a path tuple per value
    # cost more than the rest of a chat request's decoding); the path is looked up only to name a refused value.
    stack: list[tuple[Any, Any, int]] = [(root, 0, 0)]
    while stack:
        parent, key, depth = stack.pop()
        value = parent[key]
        kind = type(value)
        if kind is str:
            if not value.isascii():
                cleaned = well_formed(value)
                if cleaned is not value:
                    parent[key] = cleaned
        elif kind is float:
            if not math.isfinite(value):
                name = _name(_path_to(root, value))
                raise ProxyError(400, "invalid_request", f"'{name}': {value} is not a JSON number", param=name)
        elif kind is dict or kind is list:
            if depth >= MAX_NESTING:
                name = _name(_path_to(root, value))
                message = f"'{name}': JSON nested deeper than {MAX_NESTING} levels"
                raise ProxyError(400, "invalid_request", message, param=name)
            if kind is dict:
                if not all(k.isascii() for k in value):
                    value = parent[key] = {well_formed(k): v for k, v in value.items()}
                stack.extend([(value, k, depth + 1) for k in value])
            else:
                stack.extend([(value, i, depth + 1) for i in range(len(value))])
    return root[0]


def _clean_fast(root: list[Any]) -> bool:
    """What check_json_body does for an ordinary body, at about half the cost: strings are made well-formed in
    place and every number and nesting level is checked, visiting only containers (leaves are checked where
    they sit). Returns False, leaving the rest to the careful walk, at the first non-ASCII dict key, NaN or
    infinity, or container nested too deep.
    """
    stack: list[tuple[Any, int]] = [(root, -1)]
    while stack:
        container, depth = stack.pop()
        if type(container) is dict:
            if not all(k.isascii() for k in container):
                return False
            items = container.items()
        else:
            items = enumerate(container)
        for key, value in items:
            kind = type(value)
            if kind is str:
                if not value.isascii():
                    cleaned = well_formed(value)
                    if cleaned is not value:
                        container[key] = cleaned  # replaces a value: the dict's size does not change
            elif kind is dict or kind is list:
                if depth + 1 >= MAX_NESTING:
                    return False
                stack.append((value, depth + 1))
            elif kind is float and not math.isfinite(value):
                return False
    return True


def _path_to(root: list[Any], target: Any) -> tuple[Any, ...]:
    """The path of the first value that is `target` (by identity), in the order check_json_body visits."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root[0], ())]
    while stack:
        value, path = stack.pop()
        if value is target:
            return path
        if isinstance(value, dict):
            stack.extend((v, (*path, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(value))
    return ()


def _name(path: tuple[Any, ...]) -> str:
    """A value's location as the codecs name fields: messages[0].content[2].text."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"
