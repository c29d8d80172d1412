"""JSON as every parser decodes it, and read value by value, item by item, when the whole does not parse.

:func:`decoded` is how JSON bytes become text: invalid UTF-8 as U+FFFD, and an escaped lone UTF-16
surrogate (``"\\ud800"``) as U+FFFD too, since ``json.loads`` would make it a string that cannot be encoded
again, and no row holding one can be stored.

A ``kubectl get ... -o json`` or a Prometheus API answer killed at its deadline ends mid-item; ``kubectl get
events --watch -o json`` prints one object after another with no list around them; a hand-edited list may
hold one damaged item. ``json.loads`` refuses each of them whole. :func:`values` still gives every complete
value, and inside the value that breaks off, every complete item of its first ``"<key>": [`` array, with one
:class:`Damage` for each place that could not be read, so the parser counts it as one skip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from collectors.base import Row, Skipped
from collectors.framework.lazy_re import lazy_regex

_DECODER = json.JSONDecoder()
_SPACE = lazy_regex(r"[ \t\n\r]*")
_SURROGATE = lazy_regex(r"(\\+)(?:u|U0000)([dD][89a-fA-F][0-9a-fA-F]{2})")
"""An escaped UTF-16 surrogate (JSON and YAML ``\\uD800``, Python's ``\\U0000D800`` too) after its run of
backslashes: an odd run is an escape, an even one a literal backslash and a ``u``."""


def decoded(data: bytes) -> str:
    """JSON (or YAML, or a Python repr) bytes as text: invalid UTF-8 and escaped lone surrogates as U+FFFD."""
    return no_lone_surrogates(data.decode("utf-8", "replace"))


def no_lone_surrogates(text: str) -> str:
    """``text`` with each escape of a lone surrogate written ``\\ufffd``; an escaped pair (an emoji) stays.
    A text without such an escape is returned as it is after one substring test."""
    if "\\ud" not in text and "\\uD" not in text and "\\U0000" not in text:
        return text
    found = [m for m in _SURROGATE.finditer(text) if len(m.group(1)) % 2]
    if not found:
        return text
    lone: list[re.Match[str]] = []
    paired = -1
    for i, m in enumerate(found):
        if i == paired:
            continue
        high = int(m.group(2), 16) < 0xDC00
        nxt = found[i + 1] if i + 1 < len(found) else None
        if high and nxt is not None and nxt.start() == m.end() and len(nxt.group(1)) == 1 \
                and int(nxt.group(2), 16) >= 0xDC00:
            paired = i + 1
            continue
        lone.append(m)
    out, pos = [], 0
    for m in lone:
        escape = m.start(1) + len(m.group(1)) - 1  # the last backslash of the run starts the escape
        out.append(text[pos:escape] + "\\ufffd")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


ITEM_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError, OverflowError, RecursionError)
"""What a field of the wrong type or shape raises while one item is read (``.get`` on a string, a number
where a list belongs, a date that does not exist, an integer too large for a float)."""


class Malformed(ValueError):
    """An item of a document that is not what its tool writes (a parser's own check of a field)."""


def one_item(read: Callable[[], Iterable[Row]], what: str) -> list[Row]:
    """The rows of one item of a document (an event, a pod, a job), all or none: one that cannot be read
    is one counted skip, and the items after it are read as if it were not there."""
    try:
        return list(read())
    except Malformed as exc:
        return [Skipped(None, f"malformed {what}: {exc}"[:200])]
    except ITEM_ERRORS as exc:
        return [Skipped(None, f"unreadable {what} ({type(exc).__name__}: {exc})"[:200])]


@dataclass
class Damage:
    """One place of the text that is not valid JSON: what was lost there, and what was kept before it."""

    reason: str


def values(text: str, key: str) -> Iterator[Any]:
    """The JSON values of ``text``, then of its items where a value breaks off (see the module docstring).

    The whole text is tried first, so a well-formed document costs one ``json.loads``. A value nested deeper
    than the interpreter's recursion limit is damage too, not a crash."""
    try:
        yield json.loads(text)
        return
    except (ValueError, RecursionError):
        pass
    pos = _skip(text, 0)
    while pos < len(text):
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            head = re.compile(r'"' + re.escape(key) + r'"\s*:\s*\[').search(text, pos)
            if head is not None:  # the document holding the items: every complete one of them
                yield from _items(text, head.end(), key)
                return
            # a stream of documents (a watch): the next one starts a line as this one did
            resume = text.find("\n" + text[pos], getattr(exc, "pos", pos)) if text[pos] in "{[" else -1
            yield Damage(f"not valid JSON ({_what(exc)})" + ("" if resume < 0 else ": one document passed over"))
            if resume < 0:
                return
            pos = resume + 1
            continue
        yield value
        pos = _skip(text, end)


def _skip(text: str, pos: int) -> int:
    m = _SPACE.match(text, pos)
    return m.end() if m else pos


def _items(text: str, pos: int, key: str) -> Iterator[Any]:
    """The complete items of the array that starts at ``pos``; a damaged item is passed over when the next
    one starts a line at the indentation the damaged one had (pretty-printed output), else the reading
    stops there."""
    kept = index = 0
    damaged = False
    while True:
        pos = _skip(text, pos)
        if pos >= len(text):
            yield Damage(f"cut short after {kept} complete item(s) of {key!r}")
            return
        if text[pos] == "]":  # the array is whole: the damage that sent us here is after it, or was counted
            if not damaged:
                yield Damage(f"damaged after its {kept} item(s) of {key!r}")
            return
        index += 1
        try:
            item, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            line_start = text.rfind("\n", 0, pos) + 1
            indent = text[line_start:pos]
            resume = -1
            if line_start and not indent.strip():
                resume = text.find("\n" + indent + text[pos], getattr(exc, "pos", pos))
            if resume < 0:
                yield Damage(f"item {index} of {key!r} cut short or not valid JSON: kept the {kept} before it")
                return
            yield Damage(f"item {index} of {key!r} is not valid JSON ({_what(exc)})")
            damaged = True
            pos = resume + 1
            continue
        yield item
        kept += 1
        pos = _skip(text, end)
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("]", pos):
            yield Damage(f"item {index} of {key!r} is not followed by ',' or ']'")
            damaged = True


def _what(error: Exception) -> str:
    """The decoder's complaint without its position (a skip reason repeats per file, not per offset)."""
    if isinstance(error, json.JSONDecodeError):
        return error.msg
    return type(error).__name__
