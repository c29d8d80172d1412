"""NCCL / PyTorch distributed logs: every corpus file through ``gpuwb ingest`` + ``timeline --json``,
checked against its INDEX.tsv labels; topology from init lines; timestamps; bad input; capture."""

from __future__ import annotations

import io
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import nccl
from collectors.base import Artifact, Event, HostFact, ParseContext, Skipped, Topology
from collectors.framework.vocabulary import problems
from collectors.nccl import init_lines as nccl_init_lines
from collectors.nccl import live_capture as nccl_capture
from collectors.nccl import prefilter as nccl_prefilter
from tests.conftest import CORPUS, corpus_files, corpus_index, ingest_timeline
from tests.data.nccl_multirank import NCCL_VERSION, write_job
from workbench.store.bundle import Bundle

NCCL_FILES = corpus_files("nccl")
MTIME = datetime(2026, 11, 29, tzinfo=timezone.utc)


def _parse(text: str | bytes, *, host: str | None = None, mtime: datetime | None = MTIME) -> list:
    data = text.encode() if isinstance(text, str) else text
    ctx = ParseContext(host=host, mtime=mtime, reference_time=datetime(2026, 11, 29, tzinfo=timezone.utc))
    return list(nccl.parse("nccl_log", io.BytesIO(data), ctx))


def _events(rows: list) -> list[Event]:
    return [r for r in rows if isinstance(r, Event)]


# -- the corpus, driven by its labels -------------------------------------------------------------------------

def _ints(value: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", value)]


def _any_attr(events: list[dict], key: str, value) -> bool:
    return any(e["attrs"].get(key) == value for e in events)


def _check_ran(events: list[dict], value: str) -> bool:
    got = [e["attrs"]["elapsed_ms"] for e in events if e["kind"] == "nccl_timeout" and e["attrs"].get("elapsed_ms")]
    if ".." in value:
        low, high = (int(x) for x in value.split(".."))
        return bool(got) and all(low <= g <= high for g in got)
    return set(_ints(value)) <= set(got)


def _check_error(events: list[dict], value: str) -> bool:
    return any(value in (e["attrs"].get("error"), e["attrs"].get("exception"))
               or value in str(e["attrs"].get("last_error", "")) for e in events)


def _check_rank_field(events: list[dict], key: str, value: str) -> bool:
    field, rank = key.rsplit("_rank", 1)
    attr = {"optype": "op", "numel": "numel_in", "seq": "seq"}[field]
    mine = [e["attrs"].get(attr) for e in events if e["rank"] == int(rank) and e["kind"] == "nccl_timeout"]
    wanted = [int(v) if v.isdigit() else v for v in value.split(",")]
    return set(wanted) <= set(mine)


def _check_first_ts(events: list[dict], value: str) -> bool:
    first = min(e["ts"] for e in events if e["ts"])
    return datetime.fromisoformat(first.replace("Z", "+00:00")) == datetime.fromisoformat(
        value.replace("Z", "+00:00"))


_TS_STYLE = {"glog_MMDD": {"glog_noyear"}, "none": {"mtime"}, "iso8601_mpirun_prefix": {"iso"}}

CHECKS = {
    "host": lambda ev, v: any(e["host"] == v for e in ev),
    "hosts": lambda ev, v: set(v.split(",")) <= {e["host"] for e in ev},
    "pid": lambda ev, v: _any_attr(ev, "pid", int(v)),
    "tid": lambda ev, v: _any_attr(ev, "tid", int(v)),
    "cuda_dev": lambda ev, v: _any_attr(ev, "cuda_dev", int(v)),
    "cuda_devs": lambda ev, v: all(_any_attr(ev, "cuda_dev", d) for d in _ints(v)),
    "ib_status": lambda ev, v: all(_any_attr(ev, "status", s) for s in _ints(v)),
    "ib_error": lambda ev, v: all(_any_attr(ev, "status", s) for s in _ints(v)),
    "vendor_err": lambda ev, v: all(_any_attr(ev, "vendor_err", s) for s in _ints(v)),
    "peer": lambda ev, v: any(v in str(e["attrs"].get("peer", "")) for e in ev),
    "direction": lambda ev, v: _any_attr(ev, "direction", v),
    "nccl_result": lambda ev, v: _any_attr(ev, "nccl_result", int(v)),
    "nccl_error": lambda ev, v: any(v.split()[0] == e["attrs"].get("nccl_error") for e in ev),
    "nccl_version": lambda ev, v: _any_attr(ev, "nccl_version", v),
    "file": lambda ev, v: _any_attr(ev, "file", v),
    "seq": lambda ev, v: _any_attr(ev, "seq", int(v)),
    "optype": lambda ev, v: _any_attr(ev, "op", v),
    "numel": lambda ev, v: _any_attr(ev, "numel_in", int(v)),
    "timeout_ms": lambda ev, v: _any_attr(ev, "timeout_ms", int(v)),
    "ran_ms": _check_ran,
    "ranks": lambda ev, v: set(_ints(v)) <= {e["rank"] for e in ev if e["kind"] == "nccl_timeout"},
    "rank": lambda ev, v: any(e["rank"] == int(v) for e in ev),
    "mpi_ranks": lambda ev, v: set(_ints(v)) <= {e["attrs"].get("mpi_rank") for e in ev},
    "pg": lambda ev, v: _any_attr(ev, "pg", v),
    "last_enqueued": lambda ev, v: _any_attr(ev, "last_enqueued", int(v)),
    "last_completed": lambda ev, v: _any_attr(ev, "last_completed", int(v)),
    "ts": lambda ev, v: any((e["ts_raw"] or "").startswith(v) for e in ev),
    "first_ts": _check_first_ts,
    "ts_style": lambda ev, v: {e["ts_origin"] for e in ev if e["source"] == "nccl"} <= _TS_STYLE[v],
    "error": _check_error,
    "exception": lambda ev, v: _any_attr(ev, "exception", v),
    "proxy_rank": lambda ev, v: _any_attr(ev, "proxy_rank", int(v)),
    "action": lambda ev, v: _any_attr(ev, "action", v),
    "ibv_call": lambda ev, v: _any_attr(ev, "ibv_call", v),
    "async_event": lambda ev, v: _any_attr(ev, "async_event", v),
    "collective": lambda ev, v: _any_attr(ev, "collective", v),
    "exitcode": lambda ev, v: _any_attr(ev, "exitcode", int(v)),
    "local_rank": lambda ev, v: _any_attr(ev, "local_rank", int(v)),
    "signal": lambda ev, v: _any_attr(ev, "signal", v),
    "time": lambda ev, v: _any_attr(ev, "time", v),
    "sigterm_pids": lambda ev, v: set(_ints(v)) <= {e["attrs"].get("pid") for e in ev
                                                   if e["kind"] == "process_signal"
                                                   and e["attrs"].get("signal") == "SIGTERM"},
    "exit_barrier_elapsed_s": lambda ev, v: _any_attr(ev, "elapsed_s", float(v)),
    "source": lambda ev, v: _any_attr(ev, "origin", v),
    "gpu": lambda ev, v: not v.isdigit() or _any_attr(ev, "gpu_index", int(v)),
    **{key: (lambda k: lambda ev, v: _any_attr(ev, k, v))(key)
       for key in ("tried_alloc", "total_capacity", "free", "process_in_use", "allocated_by_pytorch",
                   "reserved_unallocated")},
}
INFORMATIONAL = {"root_cause", "scheduler", "torch", "global_step"}
"""Labels that record what the reporter or the corpus curator concluded, not text the log says."""


def _stated_in_log(path: Path, key: str, value: str) -> bool:
    """Some labels come from the issue's title or description (marked ``(title)``, or a version the
    log never prints): they describe the incident, not the file, and are not checked against it."""
    if "(title)" in value:
        return False
    return key != "nccl_version" or value in path.read_text(errors="replace")


def _labels(path: Path) -> dict[str, str]:
    return corpus_index()[f"nccl/{path.name}"]["parsed_labels"]


@pytest.mark.parametrize("path", NCCL_FILES, ids=[p.name for p in NCCL_FILES])
def test_corpus_file_meets_its_labels(path, bundle_path):
    events = [e for e in ingest_timeline(bundle_path, path) if e["source"] == "nccl"]
    assert events, f"{path.name}: no event"
    failed = []
    for key, value in _labels(path).items():
        if key in INFORMATIONAL or not _stated_in_log(path, key, value):
            continue
        if re.fullmatch(r"(optype|numel|seq)_rank\d+", key):
            ok = _check_rank_field(events, key, value)
        else:
            assert key in CHECKS, f"label {key!r} has no check: add one (or list it as informational)"
            ok = CHECKS[key](events, value)
        if not ok:
            failed.append(f"{key}={value}")
    assert not failed, f"{path.name}: labels not met: {failed}"
    with Bundle.open(bundle_path) as bundle:
        skipped, reasons = bundle.con.execute(
            "SELECT skipped, CAST(skip_reasons AS VARCHAR) FROM artifact").fetchall()[0]
    assert skipped == 0, reasons


def test_every_corpus_label_key_is_known():
    keys = {k for p in NCCL_FILES for k in _labels(p)}
    unknown = {k for k in keys if k not in CHECKS and k not in INFORMATIONAL
               and not re.fullmatch(r"(optype|numel|seq)_rank\d+", k)}
    assert not unknown


def test_ib_status_is_named_and_chain_gives_result():
    events = _events(_parse((CORPUS / "nccl" / "nccl_1814_ib_completion_status12_vendor129_then_status5.log")
                            .read_text()))
    names = {e.attrs["status"]: e.attrs["status_name"] for e in events}
    assert names == {12: "transport retry counter exceeded", 5: "work request flushed error"}
    assert all(e.layer == "network_storage" and e.attrs["nccl_result"] == 6 for e in events)
    assert events[0].attrs["chain"] == ["transport/net.cc:1298", "proxy.cc:694", "proxy.cc:874"]


def test_newest_ib_completion_format():
    line = ("node3:812:900 [1] net_ib.cc:1544 NCCL WARN NET/IB: Got completion from peer 10.1.2.3<50112> with "
            "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  localGid ::ffff:10.1.2.4 "
            "remoteGids::ffff:10.1.2.3 hca mlx5_3\n")
    (event,) = _events(_parse(line))
    assert event.kind == "nccl_net_error"
    assert (event.attrs["status"], event.attrs["vendor_err"], event.attrs["hca"], event.attrs["peer_ip"]) == (
        12, 129, "mlx5_3", "10.1.2.3")


def test_cuda_errors_are_flagged():
    oom = _events(_parse((CORPUS / "nccl" / "lerf_73_cuda_oom_legacy_capacty_msg.log").read_text()))[0]
    assert oom.kind == "cuda_error" and oom.attrs["oom"] is True and oom.layer == "gpu"
    assert oom.attrs["tried_alloc_mib"] == 3072.0 and oom.attrs["reserved_unallocated"] == "4.84 GiB"
    old = _events(_parse("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total "
                         "capacity; 9.74 GiB already allocated; 7.69 MiB free; 9.87 GiB reserved in total by "
                         "PyTorch)\n"))[0]
    assert (old.attrs["total_capacity"], old.attrs["allocated_by_pytorch"], old.attrs["free"],
            old.attrs["reserved_total"]) == ("10.76 GiB", "9.74 GiB", "7.69 MiB", "9.87 GiB")
    fault = _events(_parse((CORPUS / "nccl" / "torchrun_sigabrt_misaligned_address_rank6.log").read_text()))
    cuda = [e for e in fault if e.kind == "cuda_error"]
    assert len(cuda) == 1, "the C++ what() repeat of the Python exception is one event"
    assert cuda[0].attrs["app_fault"] is True and cuda[0].attrs["cuda_error_name"] == "cudaErrorMisalignedAddress"


def test_nan_losses_in_trainer_formats():
    text = ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1.9e-05, 'epoch': 0.42}\n"
            "Epoch 3:  41%|####      | 812/1980 [03:02<04:21, 4.47it/s, loss=nan, v_num=3]\n"
            " iteration     1200/  500000 | consumed samples:      1228800 | lm loss: nan | loss scale: 1.0 |\n"
            "Rank 3: found NaN in local forward loss calculation. Device: 3, node: node-3\n"
            "[2026-03-01 10:00:00,101] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
            "step. Attempted loss scale: 65536, reducing to 32768\n"
            "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0\n"
            "2026-03-01 10:00:01,000 - INFO - step 1201 loss 2.4410 grad_norm 0.9\n")
    events = _events(_parse(text))
    assert [e.attrs["framework"] for e in events] == ["hf_trainer", "lightning", "megatron", "megatron", "deepspeed",
                                                       "apex"]
    assert all(e.kind == "nan_loss" for e in events)
    assert events[3].rank == 3 and events[4].attrs["new_loss_scale"] == 32768.0
    assert [e.severity for e in events[4:]] == ["info", "info"]


def test_watchdog_formats_and_heartbeat():
    text = ("[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be "
            "terminated after dumping debug info. workMetaList_.size()=103\n"
            "[rank2]:[F1019 01:14:03.356851194 ProcessGroupNCCL.cpp:1224] [PG 3 Rank 2] [PG 3 Rank 2] "
            "ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued "
            "collectives.\n"
            "[rank4]:[E1019 01:04:03.357037506 ProcessGroupNCCL.cpp:1413] [PG 5 Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=12, OpType=_ALLGATHER_BASE, NumelIn=1024, NumelOut=8192, "
            "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n")
    events = _events(_parse(text))
    assert [e.attrs["reason"] for e in events] == ["heartbeat_monitor", "watchdog_stuck", "watchdog_timeout"]
    assert events[0].attrs["pending_works"] == 103 and events[0].rank == 1
    assert events[1].attrs["timeout_ms"] == 600000 and events[1].severity == "critical"
    sub = events[2]
    assert (sub.rank, sub.attrs["pg_rank"], sub.attrs["pg"], sub.attrs["op"]) == (4, 0, "5", "_ALLGATHER_BASE")


def test_elastic_failure_table_with_failures_section():
    text = """[2026-02-01 03:04:05,678] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) \
local_rank: 2 (pid: 7712) of binary: /usr/bin/python
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-02-01_03:04:05
  host      : gpu-node-3
  rank      : 11 (local_rank: 3)
  exitcode  : -6 (pid: 7713)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 7713
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-02-01_03:04:01
  host      : gpu-node-3
  rank      : 10 (local_rank: 2)
  exitcode  : -9 (pid: 7712)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 7712
============================================================
"""
    events = _events(_parse(text.replace("\\\n", "")))
    failed = [e for e in events if e.kind == "rank_failed"]
    assert [(e.rank, e.host, e.attrs.get("signal"), e.attrs.get("root_cause")) for e in failed] == [
        (None, None, "SIGKILL", None), (11, "gpu-node-3", "SIGABRT", False), (10, "gpu-node-3", "SIGKILL", True)]
    (job,) = [e for e in events if e.kind == "job_failed"]
    assert (job.rank, job.host, job.attrs["exitcode"], job.attrs["signal"], job.attrs["script"]) == (
        10, "gpu-node-3", -9, "SIGKILL", "train.py")
    assert job.ts == datetime(2026, 2, 1, 3, 4, 1, tzinfo=timezone.utc) and job.ts_origin == "torchelastic"


def test_flight_recorder_report():
    text = ("Not all ranks joining collective: sequence number: 31117\ninternal record id: 31116\n"
            "group info: 0:default_pg\ncollective: nccl:all_reduce\nmissing ranks: {3, 4, 5}\n"
            "input sizes: [[1571911]]\noutput sizes: [[1571911]]\nworld size: 8\n"
            "expected ranks: {0, 1, 2, 3, 4, 5, 6, 7}\ncollective state: scheduled\n")
    (event,) = _events(_parse(text))
    assert event.kind == "nccl_flight_recorder"
    assert (event.attrs["seq"], event.attrs["missing_ranks"], event.attrs["pg"], event.attrs["world_size"]) == (
        31117, [3, 4, 5], "default_pg", 8)


# -- topology ------------------------------------------------------------------------------------------------

def test_topology_maps_rank_host_gpu(tmp_path):
    job = write_job(tmp_path / "logs", hosts=2, gpus_per_host=8)
    ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        rows = bundle.con.execute("SELECT rank, host, gpu, nranks, cuda_dev, comm_id, nccl_version, "
                                  "CAST(extra AS VARCHAR) FROM topology ORDER BY rank").fetchall()
        versions = bundle.con.execute(
            "SELECT DISTINCT host, value FROM host_inventory WHERE key = 'versions.nccl' ORDER BY host").fetchall()
    assert [r[0] for r in rows] == list(range(16))
    for rank, host, gpu, nranks, cuda_dev, comm_id, version, extra in rows:
        assert (host, gpu, nranks, cuda_dev) == (job.host_of(rank), job.bus_of(rank), 16, rank % 8)
        assert comm_id == "0x5ae77eb5ea4ec1ee" and version == NCCL_VERSION
        assert '"P2P/IPC"' in extra or rank % 8 == 7, "ranks with an on-host peer use P2P"
        assert "NET/IB/" in extra and '"net": "IB"' in extra
    assert versions == [(h, NCCL_VERSION) for h in job.hosts]


def test_bus_id_spelling():
    assert nccl_init_lines.nccl_bus_id("19000") == "0000:19:00.0"
    assert nccl_init_lines.nccl_bus_id("9b000") == "0000:9b:00.0"
    assert nccl_init_lines.nccl_bus_id("10019010") == "0100:19:01.0"
    assert nccl_init_lines.nccl_bus_id("zz") is None


def test_rank_and_gpu_from_init_lines_of_the_same_file():
    text = ("node07:4101:4200 [3] NCCL INFO comm 0x55f0 rank 11 nranks 16 cudaDev 3 busId 5d000 - Init COMPLETE\n"
            "node07:4101:4230 [3] transport/net_ib.cc:1211 NCCL WARN NET/IB : Got completion from peer "
            "10.0.0.9<4312> with error 12, opcode 0, len 0, vendor err 129\n"
            "[E ProcessGroupNCCL.cpp:737] [Rank 11] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
            "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800345 milliseconds before timing out.\n")
    rows = _parse(text, host="folder-host")
    (topo,) = [r for r in rows if isinstance(r, Topology)]
    assert (topo.rank, topo.gpu, topo.host) == (11, "0000:5d:00.0", "node07")
    net, timeout = _events(rows)
    assert (net.rank, net.gpu, net.host) == (11, "0000:5d:00.0", "node07")
    assert (timeout.rank, timeout.gpu, timeout.host) == (11, "0000:5d:00.0", "node07")


# -- time -----------------------------------------------------------------------------------------------------

def test_nccl_timestamp_option_and_neighbours():
    text = ("node1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
            "node1:10:12 [0] misc/socket.cc:50 NCCL WARN Net : Connect to 10.0.0.2<4000> failed : "
            "Connection refused\n"
            "[2026-05-05 06:16:47] node1:10:12 [0] plugin/net.cc:300 NCCL WARN NET/IB : Got async event : "
            "port error\n"
            "node1:10:13 [0] NCCL INFO proxy.cc:1000 -> 6\n"
            "2026-05-05 06:17:02,120 - INFO - train - step 9\n"
            "node1:10:14 [0] misc/socket.cc:50 NCCL WARN Net : Call to recv from 10.0.0.3<4001> failed : "
            "Connection reset by peer\n")
    refused, port, chain, reset = _events(_parse(text))
    assert (refused.ts, refused.ts_origin, refused.ts_approx) == (
        datetime(2026, 5, 5, 6, 16, 47, tzinfo=timezone.utc), "neighbour", True)
    assert (port.ts_origin, port.ts_raw, port.ts_approx) == ("iso", "2026-05-05 06:16:47", False)
    assert chain.ts == port.ts and chain.ts_origin == "neighbour"
    assert reset.ts == datetime(2026, 5, 5, 6, 17, 2, 120000, tzinfo=timezone.utc) and reset.ts_approx
    assert refused.attrs["error"] == "Connection refused" and reset.attrs["error"] == "Connection reset by peer"


def test_glog_year_comes_from_the_reference():
    ctx = ParseContext(reference_time=datetime(2027, 1, 3, tzinfo=timezone.utc))
    line = (b"[rank0]:[E1230 23:59:58.000000001 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
            b"operation timeout: WorkNCCL(SeqNum=5, OpType=BROADCAST, Timeout(ms)=60000) ran for 60001 milliseconds "
            b"before timing out.\n")
    (event,) = _events(list(nccl.parse("nccl_log", io.BytesIO(line), ctx)))
    assert event.ts == datetime(2026, 12, 30, 23, 59, 58, tzinfo=timezone.utc) and event.ts_origin == "glog_noyear"


def test_undated_file_is_anchored_on_mtime_and_marked():
    events = _events(_parse("host1:1:2 [0] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out\n"))
    assert (events[0].ts, events[0].ts_origin, events[0].ts_approx) == (MTIME, "mtime", True)
    (bare,) = _events(_parse("host1:1:2 [0] NCCL WARN Call to ibv_reg_mr failed\n", mtime=None))
    assert bare.ts is None and bare.ts_approx is True


def test_dated_neighbour_far_back_in_the_same_block():
    filler = "".join(f"node1:10:11 [0] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x1 recvbuff 0x2 count 1 "
                     f"datatype 7 op 0 root 0 comm 0x5 [nranks=2] stream 0x6\n" for i in range(3000))
    text = "2026-01-02T03:04:05Z training started\n" + filler + "node1:10:11 [0] NCCL WARN Call to ibv_poll_cq failed\n"
    (event,) = _events(_parse(text))
    assert event.ts == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc) and event.ts_origin == "neighbour"


# -- bad input -----------------------------------------------------------------------------------------------

def _corpus_lines() -> list[bytes]:
    lines: list[bytes] = []
    for path in NCCL_FILES:
        lines += [line for line in path.read_bytes().splitlines(keepends=True) if line.strip()]
    return lines


def test_interleaved_and_cut_lines_are_counted_not_fatal():
    a = (CORPUS / "nccl" / "nccl_1405_ib_completion_status12_k8s_ddp_worker.log").read_bytes().splitlines()
    b = (CORPUS / "nccl" / "nccl-tests_252_ib_error4_connection_closed_by_localrank.log").read_bytes().splitlines()
    mixed = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            mixed.append(a[i])
        if i < len(b):
            mixed.append(b[i])
    mixed[0] = mixed[0][:70] + mixed[1]
    del mixed[1]
    mixed.append(b"kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<4")
    mixed.insert(5, b"[rank3]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
                    b"operation timeout: WorkNCCL(SeqNum=80")
    rows = _parse(b"\n".join(mixed) + b"\n")
    skipped = [r for r in rows if isinstance(r, Skipped)]
    assert len(skipped) >= 2
    events = _events(rows)
    assert {e.host for e in events} >= {"kp-ddp-worker-0", "kolyoz1", "kolyoz2"}
    assert sum(e.attrs.get("status") == 12 for e in events) >= 2, "whole lines still parse"


def test_binary_and_giant_lines():
    data = b"\x00\x01\x02 NCCL WARN \x00\n" + b"x" * (3 << 20) + b"\n" + b"\xff\xfe NCCL WARN Call to ibv_x failed\n"
    rows = _parse(data)
    skipped = [r for r in rows if isinstance(r, Skipped)]
    assert {s.reason for s in skipped} == {"binary data (NUL bytes)", "line longer than 1 MiB"}
    assert [e.attrs.get("ibv_call") for e in _events(rows)] == ["ibv_x"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_corpus_lines()), st.integers(0, 400), st.binary(max_size=12)),
                max_size=30))
def test_fuzz_cut_and_spliced_corpus_lines(parts):
    data = b"".join(line[:cut] + junk for line, cut, junk in parts)
    rows = _parse(data)
    assert all(isinstance(r, (Event, Topology, HostFact, Skipped)) for r in rows)
    assert [p for r in rows if isinstance(r, Event) for p in problems(r.kind, r.layer or nccl.LAYER, r.attrs)] == []


# -- sniffing and capture -----------------------------------------------------------------------------------

def test_sniff():
    assert nccl.sniff("x.log", "gpu1:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n") == {"nccl_log": 90}
    assert nccl.sniff("x.log", "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught") == {"nccl_log": 70}
    assert nccl.sniff("x.log", "Mar 29 15:38:59 host kernel: NVRM: Xid (PCI:0000:01:00): 79\n") == {}


class _FakeCapture:
    def __init__(self, options):
        self.options, self.missed, self.read = options, [], []

    def missing(self, what, reason):
        self.missed.append((what, reason))

    def read_file(self, path, *, kind, max_bytes=None, tail=False):
        self.read.append((path, kind, max_bytes, tail))
        return Artifact(source=path, kind=kind, path=path)


def test_capture_reads_matching_files_once(tmp_path):
    for name in ("rank0.log", "rank1.log", "other.txt"):
        (tmp_path / name).write_text("x\n")
    ctx = _FakeCapture({"nccl_log": [str(tmp_path / "rank*.log"), str(tmp_path / "*.log"),
                                     str(tmp_path / "missing-*.log")]})
    got = list(nccl.capture(ctx))
    assert sorted(os.path.basename(a.source) for a in got) == ["rank0.log", "rank1.log"]
    assert {kind for _, kind, _, _ in ctx.read} == {"nccl_log"}
    assert ctx.missed == [(str(tmp_path / "missing-*.log"), "unavailable: no file matches")]
    with open(tmp_path / "rank1.log", "r+b") as f:
        f.truncate(nccl_capture._CAPTURE_BYTES + 1)
    ctx = _FakeCapture({"nccl_log": [str(tmp_path / "rank1.log")]})
    assert len(list(nccl.capture(ctx))) == 2
    assert [(m, t) for _, _, m, t in ctx.read] == [(nccl_capture._HEAD_BYTES, False),
                                                   (nccl_capture._CAPTURE_BYTES - nccl_capture._HEAD_BYTES, True)]
    empty = _FakeCapture({"nccl_log": []})
    assert list(nccl.capture(empty)) == [] and empty.missed == [("nccl logs", "unavailable: no --nccl-log given")]


def test_live_capture_of_rank_logs(tmp_path):
    from workbench.capture.live import capture

    write_job(tmp_path / "logs", hosts=1, gpus_per_host=4, straggler=2)
    out, outcomes, complete = capture(tmp_path / "cap.duckdb", only=["nccl"],
                                      options={"nccl_log": [str(tmp_path / "logs" / "**" / "*.log")]})
    assert complete and [o.status for o in outcomes] == ["ok"]
    with Bundle.open(out) as bundle:
        kinds = dict(bundle.con.execute("SELECT kind, count(*) FROM event GROUP BY kind").fetchall())
        topo = bundle.con.execute("SELECT count(*) FROM topology").fetchall()[0][0]
    assert kinds["nccl_timeout"] == 4 and kinds["straggler_rank"] == 1 and topo == 4


def test_more_pytorch_spellings():
    text = ("[E socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to connect to "
            "(10.0.0.1, 29500).\n"
            "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
            "store by key '0', but store->get('0') got error: Socket Timeout\n"
            "RuntimeError: NCCL Error 2: unhandled system error\n"
            "[rank0]:[E1011 10:00:00.123456789 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            "Failure detected by watchdog at work sequence id: 3 PG status: last enqueued work: 3, last completed "
            "work: 2\n"
            "RuntimeError: NCCL communicator was aborted on rank 1.  Original reason for failure was: [Rank 1] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST, "
            "Timeout(ms)=1800000) ran for 1800808 milliseconds before timing out.\n"
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
            "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n")
    socket, store, system, progress, invalid, aborted = _events(_parse(text))
    assert (socket.kind, store.attrs["error"]) == ("nccl_net_error", "Socket Timeout")
    assert (system.kind, system.attrs["nccl_result"]) == ("nccl_net_error", 2)
    assert (progress.rank, progress.attrs["seq"], progress.attrs["last_completed"]) == (0, 3, 2)
    assert (invalid.kind, invalid.layer, invalid.attrs["nccl_error"], invalid.attrs["nccl_version"]) == (
        "nccl_error", "gpu", "ncclInvalidUsage", "2.19.3")
    assert (aborted.kind, aborted.rank, aborted.attrs["seq"], aborted.attrs["op"]) == ("nccl_timeout", 1, 9,
                                                                                        "BROADCAST")


# -- step timing: the line shapes real trainers print ------------------------------------------------------------

STEP_LINES = [
    # Megatron-LM (print_rank_last)
    (" [2024-05-02 11:20:41] iteration      201/  250000 | consumed samples:       205824 | elapsed time per "
     "iteration (ms): 139113.4 | learning rate: 1.507E-05 | global batch size:  1024 | lm loss: 2.373574E+00 | "
     "loss scale: 1.0 | grad norm: 0.811 | number of skipped iterations:   0 | number of nan iterations:   0 |",
     {"framework": "megatron", "step": 201, "total_steps": 250000, "seconds": 139.1134, "measure": "step"}),
    # DeepSpeed wall_clock_breakdown: global timers, compute without the gradient all-reduce
    ("[2023-06-21 07:39:09,626] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | forward: 27.46 | "
     "backward: 73.60 | backward_inner: 51.05 | backward_allreduce: 22.50 | step: 72.60",
     {"framework": "deepspeed", "seconds": 0.15111, "measure": "compute"}),
    # DeepSpeed throughput timer, new and old spellings
    ("[2024-07-17 19:53:24,981] [INFO] [timer.py:258:stop] epoch=0/micro_step=4500/global_step=4500, "
     "RunningAvgSamplesPerSec=16.124955167964504, CurrSamplesPerSec=16.807402094161112, MemAllocated=0.02GB, "
     "MaxMemAllocated=0.97GB",
     {"framework": "deepspeed", "step": 4500, "throughput": 16.807402094161112, "unit": "samples/s"}),
    ("[2022-03-11 02:06:58,985] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=83.48609168106144, "
     "MemAllocated=0.26GB, MaxMemAllocated=9.02GB",
     {"framework": "deepspeed", "step": 40, "throughput": 83.48609168106144}),
    # torchtitan, under torchrun's --tee prefix
    ("[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  "
     "tps: 5,856  tflops: 339.16  mfu: 34.29%",
     {"framework": "torchtitan", "step": 200, "throughput": 5856.0, "unit": "tokens/s", "mfu_pct": 34.29}),
    # HF Trainer / accelerate / Lightning progress bars (tqdm)
    ("  3%|███                                             | 12/345 [00:07<06:50,  1.23s/it]",
     {"framework": "tqdm", "step": 12, "total_steps": 345, "seconds": 1.23}),
    ("Epoch 0:  45%|████▌     | 450/1000 [07:30<09:10,  1.25it/s, v_num=0, train_loss=2.100]",
     {"framework": "tqdm", "step": 450, "epoch": 0, "seconds": 0.8}),
    # HF Trainer's end-of-training summary: the run's mean step time, no step
    ("{'train_runtime': 1234.5, 'train_samples_per_second': 12.3, 'train_steps_per_second': 0.4, "
     "'train_loss': 2.1, 'epoch': 3.0}",
     {"framework": "hf_trainer", "step": None, "summary": True, "seconds": 2.5, "train_runtime_s": 1234.5}),
    # plain trainer and TF object-detection spellings
    ("2025-03-12 09:33:00,000 - INFO - [rank1] step 10400 | loss 2.2710 | lr 2.40e-04 | step_time 1.43s | "
     "tokens/s 366634",
     {"framework": "plain", "step": 10400, "seconds": 1.43, "measure": "step"}),
    ("I0912 11:40:27.956218 139735407601536 model_lib_v2.py:652] Step 100 per-step time 0.813s loss=1.396",
     {"framework": "plain", "step": 100, "seconds": 0.813}),
    ("steps: 100 loss: 2.1045 iter time (s): 1.234 samples/sec: 25.931",
     {"framework": "plain", "step": 100, "seconds": 1.234}),
    ("step 7 | loss 3.1 | step_time_ms 412.5", {"framework": "plain", "step": 7, "seconds": 0.4125}),
]


@pytest.mark.parametrize("line,want", STEP_LINES, ids=[w["framework"] + str(i) for i, (_, w) in
                                                       enumerate(STEP_LINES)])
def test_step_time_formats(line, want):
    (event,) = [e for e in _events(_parse(line + "\n")) if e.kind == "step_time"]
    for key, value in want.items():
        got = event.attrs.get(key)
        assert got == pytest.approx(value) if isinstance(value, float) else got == value, (key, got)
    assert event.layer == "gpu" and event.severity == "info"


def test_lines_that_only_mention_time_are_not_steps():
    text = ("2025-03-12 09:33:00,000 - INFO - request timed out at step 5, retrying\n"
            "step 12 loss 2.1 lr 3e-4 tokens/s 10000\n"
            "Total time: 3h 12m\n"
            "[INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | optimizer_allgather: 7.96 | "
            "optimizer_gradients: 0.02 | optimizer_step: 60.64\n")
    assert [e for e in _events(_parse(text)) if e.kind == "step_time"] == []


def test_deepspeed_progress_line_numbers_the_timers_and_the_rank_comes_from_the_log():
    init = ("node05:80214:80345 [1] NCCL INFO ncclCommInitRank comm 0x55d79e41010 rank 1 nranks 4 cudaDev 1 nvmlDev 1 "
            "busId 2a000 commId 0x3e1a2b7c9d4f5e60 - Init COMPLETE\n")
    text = init + "".join(
        f"[2025-03-12 06:{10 + i}:05,000] [INFO] [logging.py:96:log_dist] [Rank 1] step={1000 * (i + 1)}, "
        f"skipped=0, lr=[0.00024], mom=[(0.9, 0.95)]\n"
        f"[2025-03-12 06:{10 + i}:05,000] [INFO] [logging.py:96:log_dist] [Rank 1] rank=1 time (ms) | forward: 300.0 | "
        f"backward: 600.0 | backward_inner: 570.0 | backward_allreduce: 30.0 | step: 120.0\n"
        for i in range(3))
    steps = [e for e in _events(_parse(text)) if e.kind == "step_time"]
    assert [(e.attrs["step"], e.attrs["index"]) for e in steps] == [(1000, 1), (2000, 2), (3000, 3)]
    assert {(e.rank, e.host, e.gpu) for e in steps} == {(1, "node05", "0000:2a:00.0")}
    assert steps[0].attrs["seconds"] == pytest.approx(0.99)
    assert steps[0].attrs["breakdown_ms"]["backward_allreduce"] == 30


def test_tqdm_carriage_returns_and_ansi_colours():
    bars = "\r".join(f" {p}%|███ | {n}/345 [00:0{p}<06:50,  {1 + p / 100:.2f}s/it]"
                     for p, n in ((1, 4), (2, 7), (3, 12)))
    (bar,) = [e for e in _events(_parse(bars + "\n")) if e.kind == "step_time"]
    assert (bar.attrs["step"], bar.attrs["seconds"]) == (12, 1.03)
    titan = ("[titan] 2026-02-24 19:46:17,508 - root - INFO - \x1b[31mstep:  4  \x1b[32mloss:  7.62585  "
             "\x1b[33mmemory: 66.91GiB(37.51%)  \x1b[34mtps: 10,050  \x1b[36mtflops: 314.71  "
             "\x1b[35mmfu: 13.99%\x1b[39m\n")
    (step,) = [e for e in _events(_parse(titan)) if e.kind == "step_time"]
    assert (step.attrs["step"], step.attrs["throughput"]) == (4, 10050.0)
    assert step.ts == datetime(2026, 2, 24, 19, 46, 17, 508000, tzinfo=timezone.utc) and step.ts_origin == "iso"


# -- checkpoint write failures inside rank logs --------------------------------------------------------------------

_RANK0_INIT = ("node21:70110:70241 [0] NCCL INFO ncclCommInitRank comm 0x55d7a1c300 rank 0 nranks 4 cudaDev 0 "
               "nvmlDev 0 busId 18000 commId 0x3e1a2b7c9d4f5e60 - Init COMPLETE\n")


def test_torch_save_stream_writer_failure_is_a_checkpoint_write_failure():
    text = _RANK0_INIT + (
        "[2023-06-02 00:34:14,497] [INFO] [torch_checkpoint_engine.py:21:save] [Torch] Saving "
        "./output/checkpoint-1428/global_step1428/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt...\n"
        "Traceback (most recent call last):\n"
        '  File "/env/lib/python3.9/site-packages/torch/serialization.py", line 441, in save\n'
        "    _save(obj, opened_zipfile, pickle_module, pickle_protocol)\n"
        '  File "/env/lib/python3.9/site-packages/torch/serialization.py", line 668, in _save\n'
        "    zip_file.write_record(name, storage.data_ptr(), num_bytes)\n"
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed writing file data/3: "
        "file write failed\n")
    (event,) = [e for e in _events(_parse(text)) if e.kind == "checkpoint_write_failed"]
    assert (event.rank, event.host, event.gpu, event.layer) == (0, "node21", "0000:18:00.0", "network_storage")
    assert event.attrs["file"] == "data/3" and event.attrs["source"] == "inline_container.cc:471"
    assert event.ts == datetime(2023, 6, 2, 0, 34, 14, 497000, tzinfo=timezone.utc) and event.ts_origin == "neighbour"


def test_enospc_after_a_save_frame_and_eio_outside_one():
    text = ("[rank0]:  File \"/env/lib/python3.7/site-packages/torch/serialization.py\", line 297, in _save\n"
            "[rank0]:    serialized_storages[key]._write_file(f, _should_read_directly(f))\n"
            "[rank0]:RuntimeError: write(): fd 29 failed with No space left on device\n")
    (full,) = _events(_parse(text))
    assert (full.kind, full.rank, full.attrs["errno"]) == ("checkpoint_write_failed", 0, "ENOSPC")
    assert "No space left" in full.message
    (eio,) = _events(_parse("2025-03-07 10:02:11,003 - ERROR - dataloader: OSError: [Errno 5] Input/output error: "
                            "'/data/shard-0042.tar'\n"))
    assert (eio.kind, eio.attrs["errno"]) == ("storage_error", "EIO")
    refused = _events(_parse("ConnectionRefusedError: [Errno 111] Connection refused\n"))
    assert not {e.kind for e in refused} & {"checkpoint_write_failed", "storage_error"}


def test_grep_pattern_selects_the_new_lines(tmp_path):
    import subprocess

    path = tmp_path / "r.log"
    path.write_text("".join(line + "\n" for line, _ in STEP_LINES)
                    + "RuntimeError: write(): fd 29 failed with No space left on device\n")
    got = subprocess.run(["grep", "-cE", nccl_prefilter.GREP_PATTERN, str(path)], capture_output=True, text=True,
                         env=dict(os.environ, LC_ALL="C"))
    assert int(got.stdout) == len(STEP_LINES) + 1
