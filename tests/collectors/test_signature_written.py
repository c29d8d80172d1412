"""Matcher.match with the kinds a format parser already wrote: the kernel parser asks it so, to skip
building attrs that would be thrown away. The answer must be the plain match, or None exactly when the
plain match is of a written kind (or parsed as one)."""

from __future__ import annotations

import pytest

from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import catalog, load_signatures

SAMPLES = [sample.line for sig in load_signatures() for sample in sig.samples]


@pytest.mark.parametrize("line", SAMPLES)
def test_written_kinds_hide_only_the_first_match(line):
    body = peel(line).message
    matcher = catalog()
    plain = matcher.match(body)
    assert plain is not None
    sig, attrs = plain
    for kind in {sig.kind, *sig.parsed_as}:
        assert matcher.match(body, {kind}) is None, kind
    assert matcher.match(body, {"a_kind_nothing_writes"}) == (sig, attrs)
    assert matcher.match(body, set()) == (sig, attrs)


def test_a_written_kind_never_brings_a_later_signature_forward():
    """Where two signatures match one body, writing the first one's kind gives None, not the second."""
    matcher = catalog()
    shown = 0
    for line in SAMPLES:
        body = peel(line).message
        matching = [s for s in matcher.signatures if s.regex.search(body)]
        if len(matching) < 2 or matching[0].kind == matching[1].kind:
            continue
        first = matching[0]
        found = matcher.match(body)
        if found is None or found[0] is not first:
            continue  # the first regex match holds none of its own anchors: the prefilter skips it
        shown += 1
        assert matcher.match(body, {first.kind}) is None
    assert shown > 0
