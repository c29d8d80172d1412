"""PyTorch's distributed vocabulary beyond the watchdog timeout: what ProcessGroupNCCL's heartbeat monitor,
blocking wait, TCPStore, torch elastic and DataLoader print, read as events with the attrs a responder
needs (who signalled first, which peer the store could not reach, which signal killed a worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.framework import torch_dist
from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import catalog
from tests.conftest import ingest_timeline

WORK = "WorkNCCL(SeqNum=8123, OpType=ALLREDUCE, NumelIn=50331648, NumelOut=50331648, Timeout(ms)=600000)"
PREFIX = "[PG ID 0 PG GUID 0(default_pg) Rank 3] "


def test_blocking_wait_timeout_is_a_watchdog_timeout_with_the_work_fields() -> None:
    finding, _ = torch_dist.classify(f"{PREFIX}[Rank 3] Work {WORK} timed out in blocking wait.", 1)
    assert finding is not None and finding.kind == "nccl_timeout"
    assert finding.attrs["reason"] == "blocking_wait"
    assert (finding.attrs["seq"], finding.attrs["op"], finding.attrs["timeout_ms"]) == (8123, "ALLREDUCE", 600000)
    assert finding.rank == 3


@pytest.mark.parametrize(("origin", "src_rank"), [("this local rank", None), (" rank 5", 5), ("rank 12", 12)])
def test_dump_signal_names_the_rank_that_failed_first(origin: str, src_rank: int | None) -> None:
    msg = (f"{PREFIX}Received a dump signal due to a collective timeout from {origin} and we will try our best to "
           "dump the debug info. Last enqueued NCCL work: 8124, last completed NCCL work: 8122.This is most likely "
           "caused by incorrect usages of collectives")
    finding, _ = torch_dist.classify(msg, 1)
    assert finding is not None and finding.attrs["reason"] == "dump_signal"
    assert finding.attrs.get("src_rank") == src_rank
    assert (finding.attrs["last_enqueued"], finding.attrs["last_completed"]) == (8124, 8122)


def test_pytorch_2_3_global_timeout_wording_is_a_dump_signal() -> None:
    finding, _ = torch_dist.classify("[Rank 1] Received a global timeout from another rank and will start to dump "
                                     "the debug info. Last enqueued NCCL work: 41, last completed NCCL work: 40.", 1)
    assert finding is not None and finding.attrs["reason"] == "dump_signal"
    assert "src_rank" not in finding.attrs and finding.attrs["last_completed"] == 40


def test_monitor_terminating_the_process_says_why() -> None:
    finding, _ = torch_dist.classify(f"{PREFIX}Terminating the process after attempting to dump debug info, due to "
                                     "ProcessGroupNCCL watchdog hang.", 1)
    assert finding is not None and finding.kind == "nccl_timeout" and finding.severity == "critical"
    assert finding.attrs == {"reason": "monitor_terminate", "error": "ProcessGroupNCCL watchdog hang", "pg_id": 0,
                             "pg": "default_pg", "pg_guid": "0", "pg_rank": 3}


def test_failure_detected_at_work_sequence_id_reads_the_sequence() -> None:
    finding, _ = torch_dist.classify(f"{PREFIX} failure detected by watchdog at work sequence id: 8123 PG status: "
                                     "last enqueued work: 8124, last completed work: 8122", 1)
    assert finding is not None and finding.attrs["seq"] == 8123 and finding.attrs["last_enqueued"] == 8124


def _match(line: str) -> tuple[str, dict] | None:
    found = catalog().match(peel(line).message)
    return (found[0].id, found[1]) if found else None


@pytest.mark.parametrize(("line", "cause"), [
    ("RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.", "host_oom_kill"),
    ("RuntimeError: DataLoader worker (pid 3855) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.", "host_oom_kill"),
    ("RuntimeError: DataLoader worker (pid 6303) is killed by signal: Aborted. ", None),
    ("RuntimeError: DataLoader worker (pid 77) is killed by signal: Segmentation fault. ", None),
])
def test_only_memory_signals_of_a_dataloader_worker_point_at_host_memory(line: str, cause: str | None) -> None:
    found = _match(line)
    assert found is not None
    assert found[1].get("causes") == ([cause] if cause else None)


def test_store_lines_name_the_peer_and_the_count_of_ranks_that_joined() -> None:
    sig, attrs = _match("torch.distributed.DistStoreError: Timed out after 1201 seconds waiting for clients. "
                        "511/512 clients joined.")
    assert sig == "c10d_store_clients_timeout" and (attrs["joined"], attrs["expected"]) == (511, 512)
    sig, attrs = _match("[E1201 10:01:02.123456 4711 TCPStore.cpp:1281] [c10d] recvValue failed on SocketImpl(fd=57, "
                        "addr=[node03]:48732, remote=[node01.cluster]:29500): Connection reset by peer")
    assert (sig, attrs["peer"], attrs["peer_port"], attrs["error"]) == (
        "c10d_socket_io_failed", "node01.cluster", 29500, "Connection reset by peer")
    sig, attrs = _match("[W socket.cpp:601] [c10d] The client socket has timed out after 600s while trying to "
                        "connect to (master-0, 23456).")
    assert (sig, attrs["peer"], attrs["peer_port"], attrs["timeout_s"]) == (
        "c10d_client_socket_timeout", "master-0", 23456, 600)


def test_remote_error_signal_carries_the_source_rank() -> None:
    sig, attrs = _match(f"{PREFIX} remote error detected from rank: 17")
    assert sig == "pgnccl_remote_error" and attrs["src_rank"] == 17 and attrs["stage"] == "remote_error"


def test_an_aftermath_line_on_a_line_the_nccl_reader_already_read_writes_nothing_more(tmp_path: Path) -> None:
    """One line holding both the NCCL error and ProcessGroupNCCL's tear-down sentence (a log whose newlines
    were lost) is one event: the error, not a second 'tear-down' event for the same line."""
    log = tmp_path / "rank3.log"
    log.write_text(f"{PREFIX}[Rank 3] Some NCCL operations have failed or timed out. Due to the asynchronous nature "
                   "of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. "
                   "RuntimeError: NCCL error: remote process exited or there was a network error, NCCL version "
                   "2.14.3\n")
    kinds = [e["kind"] for e in ingest_timeline(tmp_path / "b.duckdb", log)]
    assert kinds == ["nccl_net_error"]
