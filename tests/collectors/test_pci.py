"""lspci -vv: link trained below capability, AER status bits; layouts of old and new pciutils."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import pci
from collectors.base import Event, HostFact, ParseContext, SeriesPoint, Skipped
from tests.conftest import ingest_timeline

MTIME = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)

# An H100 whose link trained at x8, with AER bits set (layout of pciutils 3.7+, ``lspci -vv -D``).
DEGRADED_GPU = """0000:19:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr+ Stepping- SERR+ FastB2B- DisINTx+
\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- <MAbort- >SERR- <PERR- INTx-
\tLatency: 0
\tInterrupt: pin A routed to IRQ 18
\tNUMA node: 0
\tRegion 0: Memory at 9c000000 (32-bit, non-prefetchable) [size=16M]
\tCapabilities: [60] Power Management version 3
\t\tFlags: PMEClk- DSI- D1- D2- AuxCurrent=0mA PME(D0+,D1-,D2-,D3hot+,D3cold-)
\tCapabilities: [68] Express (v2) Endpoint, MSI 00
\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us
\t\tDevSta:\tCorrErr+ NonFatalErr- FatalErr- UnsupReq+ AuxPwr- TransPend-
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\t\tClockPM+ Surprise- LLActRep- BwNot- ASPMOptComp+
\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+
\t\t\tExtSynch- ClockPM+ AutWidDis- BWInt- AutBWInt-
\t\tLnkSta:\tSpeed 32GT/s, Width x8 (downgraded)
\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
\tCapabilities: [100 v2] Advanced Error Reporting
\t\tUESta:\tDLP- SDES- TLP- FCP- CmpltTO+ CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- UnsupReq- ACSViol-
\t\tUEMsk:\tDLP- SDES- TLP- FCP- CmpltTO- CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- UnsupReq- ACSViol-
\t\tUESvrt:\tDLP+ SDES+ TLP- FCP+ CmpltTO- CmpltAbrt- UnxCmplt- RxOF+ MalfTLP+ ECRC- UnsupReq- ACSViol-
\t\tCESta:\tRxErr- BadTLP+ BadDLLP- Rollover- Timeout- AdvNonFatalErr+
\t\tCEMsk:\tRxErr- BadTLP- BadDLLP- Rollover- Timeout- AdvNonFatalErr+
\tKernel driver in use: nvidia
\tKernel modules: nvidiafb, nouveau, nvidia_drm, nvidia

"""

# An idle RTX 4090: newer lspci marks the idle speed as "(downgraded)" (tinygrad open-gpu-kernel-modules #6).
IDLE_GPU = """62:00.0 VGA compatible controller: NVIDIA Corporation AD102 [GeForce RTX 4090] (rev a1) (prog-if 00 [VGA \
controller])
\tSubsystem: Micro-Star International Co., Ltd. [MSI] AD102 [GeForce RTX 4090]
\tCapabilities: [78] Express (v2) Legacy Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)
\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
"""

# Older pciutils (3.5): no "(ok)/(downgraded)" annotations, LnkSta flags on the same line.
OLD_NIC_AND_FATAL_ROOT_PORT = """3b:00.0 Infiniband controller [0207]: Mellanox Technologies MT28908 Family \
[ConnectX-6] [15b3:101b]
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported, Exit Latency L0s unlimited, L1 unlimited
\t\tLnkSta:\tSpeed 8GT/s, Width x16, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
3a:00.0 PCI bridge [0604]: Intel Corporation Sky Lake-E PCI Express Root Port A [8086:2030] (rev 04)
\tCapabilities: [90] Express (v2) Root Port (Slot+), MSI 00
\t\tLnkCap:\tPort #5, Speed 8GT/s, Width x16, ASPM L1, Exit Latency L0s <512ns, L1 <16us
\t\tLnkSta:\tSpeed 2.5GT/s, Width x4, TrErr- Train- SlotClk+ DLActive+ BWMgmt- ABWMgmt-
\tCapabilities: [148 v1] Advanced Error Reporting
\t\tUESta:\tDLP- SDES+ TLP- FCP- CmpltTO- CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- UnsupReq- ACSViol-
\t\tCESta:\tRxErr- BadTLP- BadDLLP- Rollover- Timeout- NonFatalErr-
"""


def _rows(text: str) -> list:
    ctx = ParseContext(host="gpu07", mtime=MTIME)
    return list(pci.parse("lspci_vv", io.BytesIO(text.encode()), ctx))


def _events(rows: list, kind: str) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == kind]


def test_degraded_gpu_width_and_aer_bits() -> None:
    rows = _rows(DEGRADED_GPU)
    link = _events(rows, "pcie_link_degraded")
    assert len(link) == 1
    assert link[0].attrs == {"device": "0000:19:00.0", "role": "gpu", "name": link[0].attrs["name"],
                             "cap_speed": "32GT/s", "cap_width": 16, "sta_speed": "32GT/s", "sta_width": 8,
                             "degraded": "width", "marked": True}
    assert link[0].gpu == "0000:19:00.0" and link[0].severity == "warning"
    aer = {e.attrs["severity"]: e for e in _events(rows, "pcie_aer")}
    assert aer["uncorrected_nonfatal"].attrs["bits"] == ["CmpltTO"], "CmpltTO is not severe in UESvrt"
    assert aer["corrected"].attrs["bits"] == ["BadTLP", "AdvNonFatalErr"]
    assert aer["uncorrected_nonfatal"].severity == "error" and aer["corrected"].severity == "warning"
    facts = {r.key: r.value for r in rows if isinstance(r, HostFact)}
    assert facts["pcie.0000:19:00.0.link"] == "32GT/s x8 (capable 32GT/s x16)"


def test_idle_gpu_speed_downshift_is_info_only() -> None:
    rows = _rows(IDLE_GPU)
    assert _events(rows, "pcie_link_degraded") == []
    events = _events(rows, "pcie_link_downshift")
    assert len(events) == 1
    assert events[0].severity == "info" and events[0].attrs["degraded"] == "speed"
    assert events[0].attrs["device"] == "0000:62:00.0" and "idle" in events[0].message


def test_old_lspci_nic_speed_and_fatal_aer_on_root_port() -> None:
    rows = _rows(OLD_NIC_AND_FATAL_ROOT_PORT)
    link = _events(rows, "pcie_link_degraded")
    assert [(e.attrs["device"], e.attrs["role"], e.attrs["degraded"]) for e in link] == [
        ("0000:3b:00.0", "nic", "speed")], "bridges are not flagged for links; NICs do not idle down"
    aer = _events(rows, "pcie_aer")
    assert [(e.attrs["device"], e.attrs["severity"], e.attrs["bits"]) for e in aer] == [
        ("0000:3a:00.0", "uncorrected_fatal", ["SDES"])], "without UESvrt the spec's default severities apply"
    assert aer[0].severity == "critical" and aer[0].gpu is None


def test_access_denied_is_a_counted_skip() -> None:
    text = "19:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)\n" \
           "\tCapabilities: <access denied>\n\tKernel driver in use: nvidia\n"
    rows = _rows(text)
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["capabilities not readable (lspci -vv needs root)"]
    assert not [r for r in rows if isinstance(r, Event)]


def test_lspci_through_ingest(tmp_path: Path) -> None:
    path = tmp_path / "evidence" / "gpu07" / "lspci-vv.txt"
    path.parent.mkdir(parents=True)
    path.write_text(DEGRADED_GPU + IDLE_GPU)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    kinds = sorted((e["kind"], e["severity"]) for e in events)
    assert kinds == [("pcie_aer", "error"), ("pcie_aer", "warning"), ("pcie_link_degraded", "warning"),
                     ("pcie_link_downshift", "info")]
    assert all(e["layer"] == "hardware" and e["host"] == "gpu07" for e in events)


REAL_LINES = (DEGRADED_GPU + IDLE_GPU + OLD_NIC_AND_FATAL_ROOT_PORT).splitlines()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=80)), max_size=40))
def test_mixed_real_and_junk_lines_never_raise(lines: list[str]) -> None:
    rows = _rows("\n".join(lines).encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    assert all(isinstance(r, (Event, HostFact, SeriesPoint, Skipped)) for r in rows)
