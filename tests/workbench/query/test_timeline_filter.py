"""The one-line timeline filter: facets, free text, times on the incident's day; and back to words."""

from __future__ import annotations

from datetime import datetime

import pytest

from workbench.errors import InputError
from workbench.query.timeline_filter import describe, parse_filter

DAY = datetime(2026, 3, 14, 10, 6)


def test_facets_times_and_free_text():
    flt = parse_filter("host:node03,node04 layer:hw sev:ERROR rank:19 gpu:0000:5d:00.0 since:09:10 "
                       "until:2026-03-14T09:30:00Z fell off", reference=DAY)
    assert flt.hosts == ("node03", "node04") and flt.layers == ("hardware",) and flt.severities == ("error",)
    assert flt.ranks == (19,) and flt.gpu == "0000:5d:00.0"
    assert flt.since == datetime(2026, 3, 14, 9, 10)
    assert flt.until is not None and flt.until.hour == 9 and flt.until.minute == 30
    assert flt.text == "fell off"


def test_describe_reads_back_as_the_same_filter():
    flt = parse_filter("kind:xid,pcie_aer host:node03 rank:1,2 sev:warning Xid", reference=DAY)
    assert parse_filter(describe(flt), reference=DAY) == flt


@pytest.mark.parametrize("bad", ["layer:gpus", "sev:loud", "rank:x", "since:yesterday"])
def test_a_bad_word_is_one_clear_error(bad):
    with pytest.raises(InputError):
        parse_filter(bad, reference=DAY)


def test_words_that_only_look_like_facets_are_text():
    flt = parse_filter("NCCL WARN net:ib0 http://x", reference=DAY)
    assert flt.layers == () and flt.text == "NCCL WARN net:ib0 http://x"
