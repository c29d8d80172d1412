"""The kernel families of the signature catalog run inside the kernel collector, on its candidate lines
only (collectors/kernel/, SIGNATURES_INLINE): a sample of theirs that holds none of the collector's
KEYWORDS would never be matched in a real dmesg, however right its regex. Each sample, parsed as a
kernel log, must yield its entry's kind (or the kind the format parser writes for it: parsed_as)."""

from __future__ import annotations

import io

import pytest

from collectors import kernel
from collectors.base import Event, ParseContext
from collectors.framework.signatures import load_signatures

KERNEL_SAMPLES = [(sig, sample) for sig in load_signatures() if sig.family.startswith("kernel")
                  for sample in sig.samples]


@pytest.mark.parametrize(("sig", "sample"), KERNEL_SAMPLES,
                         ids=[f"{s.id}-{i}" for i, (s, _) in enumerate(KERNEL_SAMPLES)])
def test_a_kernel_family_sample_is_an_event_of_the_kernel_collector(sig, sample) -> None:
    rows = kernel.parse("dmesg", io.BytesIO((sample.line + "\n").encode()), ParseContext(host="node-1"))
    kinds = {r.kind for r in rows if isinstance(r, Event)}
    assert kinds & ({sig.kind} | set(sig.parsed_as)), f"{sig.id}: {sample.line!r} yields {sorted(kinds)}"


def test_the_reach_is_checked_for_every_kernel_family() -> None:
    assert {s.family for s, _ in KERNEL_SAMPLES} >= {"kernel", "kernel_core", "kernel_pcie", "kernel_storage",
                                                     "kernel_nic"}
