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
from tests.conftest import CORPUS, corpus_files, corpus_index, ingest_timeline
from tests.data.nccl_multirank import NCCL_VERSION, write_job
from workbench.bundle import Bundle

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
    assert nccl.nccl_bus_id("19000") == "0000:19:00.0"
    assert nccl.nccl_bus_id("9b000") == "0000:9b:00.0"
    assert nccl.nccl_bus_id("10019010") == "0100:19:01.0"
    assert nccl.nccl_bus_id("zz") is None


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
    assert all(r.kind in nccl.EVENTS for r in rows if isinstance(r, Event))


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
        f.truncate(nccl._CAPTURE_BYTES + 1)
    ctx = _FakeCapture({"nccl_log": [str(tmp_path / "rank1.log")]})
    assert len(list(nccl.capture(ctx))) == 2
    assert [(m, t) for _, _, m, t in ctx.read] == [(nccl._HEAD_BYTES, False),
                                                   (nccl._CAPTURE_BYTES - nccl._HEAD_BYTES, True)]
    empty = _FakeCapture({"nccl_log": []})
    assert list(nccl.capture(empty)) == [] and empty.missed == [("nccl logs", "unavailable: no --nccl-log given")]


def test_live_capture_of_rank_logs(tmp_path):
    from workbench.capture import capture

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
