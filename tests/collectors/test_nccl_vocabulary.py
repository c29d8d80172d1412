"""NCCL's own messages (collectors/catalog/harvest/nccl.yaml, every WARN of its source): each line yields
a specific kind, and the messages that name a setup mistake, a full /dev/shm, a failed allocation or an
NVLS bind failure mean that, bare or inside PyTorch's DistBackendError ``Last error:``."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pytest
import yaml

from collectors import catalog as catalog_package
from collectors import nccl
from collectors.base import Event, ParseContext
from collectors.catalog import package_text
from collectors.framework.signatures import catalog

WHEN = datetime(2026, 11, 29, tzinfo=timezone.utc)
GENERIC = {"nccl_warn", "unrecognised_error"}
PREFIX = "gpu-node-1:23456:23519 [1] misc/x.cc:12 NCCL WARN "


def _kinds_by_line(text: str) -> dict[int, set[str]]:
    """The kinds each line yields through the NCCL parser and then the signature catalog, as ingest runs them."""
    data = text.encode()
    ctx = ParseContext(host=None, mtime=WHEN, reference_time=WHEN)
    kinds: dict[int, set[str]] = {}
    for row in nccl.parse("nccl_log", io.BytesIO(data), ctx):
        if isinstance(row, Event) and row.line:
            kinds.setdefault(row.line, set()).add(row.kind)
    for event in catalog().scan(io.BytesIO(data), parsed={k: set(v) for k, v in kinds.items()}):
        kinds.setdefault(event.line, set()).add(event.kind)
    return kinds


def _events(text: str) -> list[Event]:
    ctx = ParseContext(host=None, mtime=WHEN, reference_time=WHEN)
    return [r for r in nccl.parse("nccl_log", io.BytesIO(text.encode()), ctx) if isinstance(r, Event)]


def test_nine_in_ten_of_nccls_harvested_messages_yield_a_specific_kind():
    harvest = yaml.safe_load(package_text(catalog_package, "harvest/nccl.yaml"))
    texts = [m["text"] for m in harvest["messages"]]
    assert len(texts) > 400 and harvest["source"]["version"].startswith("v2.")
    kinds = _kinds_by_line("\n".join(texts) + "\n")
    missed = [t for i, t in enumerate(texts, 1) if not kinds.get(i, set()) - GENERIC]
    assert len(missed) <= len(texts) // 10, missed[:20]


@pytest.mark.parametrize(("message", "kind", "cause"), [
    ("Bootstrap : no socket interface found", "nccl_setup_error", "network_misconfigured"),
    ("NET/Socket : No interface found in the same subnet as remote address 10.0.0.2<43567>",
     "nccl_setup_error", "network_misconfigured"),
    ("no device found matching eth9, verify NCCL_OOB_NET_IFNAME", "nccl_setup_error", "network_misconfigured"),
    ("Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or <hostname>:<port>",
     "nccl_setup_error", "network_misconfigured"),
    ("Net : error encountered when getting address info : Name or service not known",
     "nccl_setup_error", "network_misconfigured"),
    ("Mismatched NCCL version detected : rank 0 version 22304 rank 8 version 21805",
     "nccl_setup_error", "driver_stack_mismatch"),
    ("Error while creating shared memory segment /dev/shm/nccl-WU88OE (size 9637888), "
     "error: No space left on device (28)",
     "nccl_shm_error", "shm_exhausted"),
    ("Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes", "nccl_shm_error", "shm_exhausted"),
    ("Call to posix_fallocate failed : No space left on device", "nccl_shm_error", "shm_exhausted"),
    ("Failed to CUDA calloc 1048576 bytes", "nccl_alloc_failed", "gpu_oom"),
    ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the operation cannot "
     "be performed in the present state'.", "nccl_nvls_error", "fabric_manager_down"),
    ("NET/IB : Got completion from peer 10.0.35.1<49189> with status=12 opcode=0 len=0 vendor err 129 (Send)",
     "nccl_net_error", "network_fabric_errors"),
])
def test_a_bare_warn_means_what_it_says(message, kind, cause):
    got = [e for e in _events(PREFIX + message + "\n") if e.kind not in GENERIC]
    assert [e.kind for e in got] == [kind]
    assert got[0].attrs.get("causes") == [cause]


def test_an_ib_completion_keeps_its_status_name():
    event, = _events(PREFIX + "NET/IB : Got completion from peer 10.0.35.1<49189> with status=5 opcode=0 len=0 "
                              "vendor err 249 (Recv)\n")
    assert event.attrs["status"] == 5 and "flush" in event.attrs["status_name"].lower()


@pytest.mark.parametrize(("last_error", "kind", "cause"), [
    ("Error while creating shared memory segment /dev/shm/nccl-KWfVyt (size 5967872)", "nccl_shm_error",
     "shm_exhausted"),
    ("Bootstrap : no socket interface found", "nccl_setup_error", "network_misconfigured"),
    ("Failed to CUDA calloc 2097152 bytes", "nccl_alloc_failed", "gpu_oom"),
])
def test_pytorchs_last_error_means_what_the_bare_warn_means(last_error, kind, cause):
    text = ("torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
            f"Last error:\n{last_error}\n")
    got = [e for e in _events(text) if e.kind not in GENERIC]
    assert [e.kind for e in got] == [kind]
    assert got[0].attrs.get("causes") == [cause]


def test_pytorchs_last_error_cuda_oom_reads_as_the_cuda_error():
    text = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
            "ncclUnhandledCudaError: Call to CUDA function failed.\n"
            "Last error:\nCuda failure 'out of memory'\n")
    event, = [e for e in _events(text) if e.kind not in GENERIC]
    assert event.kind == "cuda_error" and event.attrs.get("oom") is True


def test_nccl_230s_completion_names_its_status_and_keeps_the_fabric_cause():
    event, = _events(PREFIX + "NET/IB: Got completion from peer 10.1.2.3<45678> with status=IBV_WC_RETRY_EXC_ERR(12) "
                              "opcode=IBV_WC_SEND(2) vendor_err=129  localGid fe80::1 remoteGidsfe80::2 hca mlx5_0\n")
    assert (event.kind, event.attrs["status"]) == ("nccl_net_error", 12)
    assert event.attrs["causes"] == ["network_fabric_errors"]
    assert event.attrs["status_name"] == "transport retry counter exceeded"
