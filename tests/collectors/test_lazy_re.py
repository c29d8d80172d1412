"""collectors/framework/lazy_re.py: a module-level pattern compiles on first use and then is the plain
``re.Pattern`` in its module, so the hot paths see no stand-in."""

from __future__ import annotations

import re
import types

from collectors.framework.lazy_re import LazyPattern, lazy_regex


def _module(source: str) -> types.ModuleType:
    module = types.ModuleType("probe")
    exec(source, module.__dict__)  # noqa: S102 - a tiny module of the test's own text
    return module


def test_a_lazy_pattern_compiles_on_first_use_and_takes_the_patterns_place():
    module = _module("from collectors.framework.lazy_re import lazy_regex\n"
                     "import re\n"
                     "WORD = lazy_regex(r'(?P<w>ab+)', re.I)\n"
                     "def find(text):\n"
                     "    return WORD.search(text)\n")
    assert isinstance(module.WORD, LazyPattern)
    assert module.WORD.pattern == "(?P<w>ab+)"  # the source text needs no compile
    assert isinstance(module.WORD, LazyPattern)
    assert module.find("xABBy").group("w") == "ABB"
    assert isinstance(module.WORD, re.Pattern)
    assert module.WORD == re.compile(r"(?P<w>ab+)", re.I)


def test_a_lazy_pattern_answers_as_the_compiled_one():
    lazy = lazy_regex(rb"k=(\d+)")
    compiled = re.compile(rb"k=(\d+)")
    assert lazy.findall(b"k=1 k=22") == compiled.findall(b"k=1 k=22") == [b"1", b"22"]
    assert (lazy.groups, lazy.groupindex, lazy.flags) == (compiled.groups, compiled.groupindex, compiled.flags)
