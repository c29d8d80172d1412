"""Ranks placed from launcher evidence when NCCL's init lines are missing or predate commId
(collectors/framework/launcher_places.py through the NCCL log reader). Lines are real, with their URL."""

# ruff: noqa: E501  (real lines are kept whole)

from __future__ import annotations

import io
from datetime import datetime, timezone

from collectors import nccl
from collectors.base import Event, ParseContext, Topology
from tests.conftest import CORPUS, run_cli
from workbench.store.bundle import Bundle


def _topology(text: str, *, host: str | None = None, name: str = "") -> list[Topology]:
    ctx = ParseContext(host=host, source_name=name, mtime=datetime(2026, 11, 29, tzinfo=timezone.utc),
                       reference_time=datetime(2026, 11, 29, tzinfo=timezone.utc))
    return [row for row in nccl.parse("nccl_log", io.BytesIO(text.encode()), ctx) if isinstance(row, Topology)]


def _placed(rows: list[Topology], by: str) -> dict[int, Topology]:
    return {row.rank: row for row in rows if row.extra.get("placed_by") == by and row.rank is not None}


OLD_INIT = """\
A03-R28-I49-3-9000018:193027:193119 [7] NCCL INFO comm 0x7fdf08000d00 rank 15 nranks 16 cudaDev 7 busId e7000 - Init COMPLETE
A03-R28-I49-3-9000018:193027:193118 [6] NCCL INFO comm 0x7fdf04000d00 rank 14 nranks 16 cudaDev 6 busId e1000 - Init COMPLETE
A03-R28-I49-2-6000166:58077:58137 [2] NCCL INFO comm 0x7f30b0000d00 rank 2 nranks 16 cudaDev 2 busId 64000 - Init COMPLETE
"""
"""NCCL before 2.19: no commId, no nvmlDev (https://github.com/NVIDIA/nccl/issues/629)."""


def test_old_init_lines_without_comm_id_place_rank_host_and_gpu() -> None:
    rows = {row.rank: row for row in _topology(OLD_INIT)}
    assert set(rows) == {15, 14, 2}
    assert (rows[15].host, rows[15].cuda_dev, rows[15].gpu, rows[15].nranks) == (
        "A03-R28-I49-3-9000018", 7, "0000:e7:00.0", 16)
    assert rows[2].host == "A03-R28-I49-2-6000166" and rows[2].gpu == "0000:64:00.0"
    assert "placed_by" not in rows[15].extra


RENDEZVOUS = """\
INFO:torch.distributed.elastic.agent.server.api:[] Rendezvous complete for workers. Result:
  restart_count=0
  master_addr=tristanr-arch2
  master_port=48089
  group_rank=0
  group_world_size=2
  local_ranks=[0]
  role_ranks=[0]
  global_ranks=[0]
  role_world_sizes=[2]
  global_world_sizes=[2]

INFO:torch.distributed.elastic.agent.server.api:[] Starting worker group
"""
"""https://github.com/meta-pytorch/torchx/pull/492 (the ``ray/0 (CommandActor pid=494406)`` prefix Ray puts
before each line left off)."""


def test_rendezvous_table_places_the_agents_ranks_on_its_host() -> None:
    rows = _placed(_topology(RENDEZVOUS, host="tristanr-arch2"), "torchelastic")
    assert set(rows) == {0}
    assert (rows[0].host, rows[0].nranks, rows[0].extra["local_rank"], rows[0].extra["group_rank"]) == (
        "tristanr-arch2", 2, 0, 0)


def test_rendezvous_table_of_an_unknown_host_places_nothing() -> None:
    assert _placed(_topology(RENDEZVOUS), "torchelastic") == {}


def test_agent_failure_line_gives_the_ranks_pid() -> None:
    """The torch 2.4 agent line (https://github.com/pytorch/pytorch/issues/147064) names a local rank and a
    pid; the agent's own rendezvous table says which global rank that local rank was."""
    text = RENDEZVOUS + (
        "E0213 12:07:20.086000 870572 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 0 (pid: 876053) of binary: /usr/local/google/home/kiuk/.pyenv/versions/3.11.4/envs/venv311/bin/python3.11\n")
    rows = _placed(_topology(text, host="tristanr-arch2"), "failure_table")
    assert rows[0].pid == 876053 and rows[0].host == "tristanr-arch2"


WARN = ("hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> "
        "with status=12 opcode=1 len=0 vendor err 129 (Recv) localGid ::ffff:172.36.134.184 remoteGids::ffff:172.36.143.59 hca mlx5_4")
"""tests/corpus/nccl/nccl_1814_ib_completion_status12_vendor129_then_status5.log"""
WATCHDOG = ("[rank36]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 36] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran "
            "for 600020 milliseconds before timing out.")
"""tests/corpus/nccl/basicsr_737_watchdog_allreduce_pg_guid.log, as rank 36 of that job would print it."""


def test_warn_header_in_a_one_rank_log_places_that_rank() -> None:
    rows = _placed(_topology(WARN + "\n" + WATCHDOG + "\n"), "nccl_header")
    assert set(rows) == {36}
    assert (rows[36].host, rows[36].pid, rows[36].cuda_dev) == ("hostname-test", 984, 4)


def test_warn_header_in_a_log_of_two_ranks_places_nobody() -> None:
    other = WATCHDOG.replace("[rank36]", "[rank37]").replace("[Rank 36]", "[Rank 37]")
    assert _placed(_topology(WARN + "\n" + WATCHDOG + "\n" + other + "\n"), "nccl_header") == {}


def test_warn_header_under_a_launcher_prefix_needs_no_file_rank() -> None:
    text = f"36: {WARN}\n37: {WATCHDOG.replace('36', '37')}\n"
    rows = _placed(_topology(text), "nccl_header")
    assert set(rows) == {36} and rows[36].host == "hostname-test"


def test_srun_labels_become_hostless_rows_with_the_job_of_the_file_name() -> None:
    text = f"0: {WATCHDOG.replace('36', '0')}\n3: {WATCHDOG.replace('36', '3')}\n"
    rows = _placed(_topology(text, name="/scratch/slurm-91842.out"), "srun_label")
    assert set(rows) == {0, 3}
    assert all(row.host is None and row.job == "91842" for row in rows.values())


def test_environment_dump_pins_rank_host_and_physical_gpu() -> None:
    """Variables as srun(1) exports them (OUTPUT ENVIRONMENT VARIABLES)."""
    text = ("SLURM_JOB_ID=91842\nSLURM_PROCID=5\nSLURM_LOCALID=1\nSLURMD_NODENAME=node08\n"
            "CUDA_VISIBLE_DEVICES=4,5,6,7\nWORLD_SIZE=16\n")
    rows = _placed(_topology(text), "environment")
    assert (rows[5].host, rows[5].job, rows[5].nranks, rows[5].extra["local_rank"], rows[5].extra["gpu_index"]) == (
        "node08", "91842", 16, 1, 5)
    single = _placed(_topology("export RANK=2\nexport LOCAL_RANK=0\nexport CUDA_VISIBLE_DEVICES=3\n", host="n1"),
                     "environment")
    assert (single[2].host, single[2].extra["gpu_index"]) == ("n1", 3)


def test_two_different_dumps_in_one_file_place_nobody() -> None:
    text = "SLURM_PROCID=5\nSLURMD_NODENAME=node08\nSLURM_PROCID=6\n"
    assert _placed(_topology(text), "environment") == {}


def test_launcher_logs_are_sniffed_as_rank_logs() -> None:
    agent = "I0312 06:00:03.000000 80190 torch/distributed/elastic/agent/server/api.py:525] [default] Rendezvous complete for workers. Result:\n"
    assert nccl.sniff("torchrun.log", agent) == {"nccl_log": 70}
    assert nccl.sniff("env.txt", "HOME=/root\nSLURM_PROCID=3\n") == {"nccl_log": 30}
    tee = "".join(f"[rank0]:line {i}\n" for i in range(3))
    assert nccl.sniff("rank0.log", tee) == {"nccl_log": 75}
    assert nccl.sniff("notes.txt", "RANK is a word\n") == {}


def test_flight_recorder_dump_places_its_rank_on_the_host_it_came_from(tmp_path) -> None:
    """One dump per rank, named by the rank; the pickle inside is never loaded."""
    dump = tmp_path / "ev" / "node07" / "nccl_trace_rank_1"
    dump.parent.mkdir(parents=True)
    dump.write_bytes(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x07version\x94\x8c\x032.4\x94s.")
    assert nccl.sniff("nccl_trace_rank_1", "") == {"nccl_trace": 85}
    assert nccl.sniff("nccl_trace_rank_x", "") == {}
    code, out, err = run_cli("ingest", tmp_path / "b.duckdb", tmp_path / "ev")
    assert code == 0, err or out
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        rows = bundle.con.execute("SELECT rank, host, extra->>'placed_by' FROM topology").fetchall()
    assert rows == [(1, "node07", "flight_recorder")]


def test_torchrun_local_rank_prefix_with_the_agents_table_gives_the_global_rank() -> None:
    """torchrun --tee on one host: the workers' lines under ``[default0]:``, the agent's table in the same file."""
    table = RENDEZVOUS.replace("group_rank=0", "group_rank=1").replace("global_ranks=[0]", "global_ranks=[1]")
    rows = _placed(_topology(table + f"[default0]:{WARN}\n", host="hostname-test"), "nccl_header")
    assert set(rows) == {1} and (rows[1].pid, rows[1].cuda_dev) == (984, 4)
    assert _placed(_topology(f"[default0]:{WARN}\n", host="hostname-test"), "nccl_header") == {}


def test_torchrun_root_cause_table_places_the_failed_rank() -> None:
    """tests/corpus/nccl/torchrun_sigabrt_misaligned_address_rank6.log: ``host : zkrh-58``, ``rank : 6
    (local_rank: 6)``, ``pid : 1246013`` in the ChildFailedError table."""
    text = (CORPUS / "nccl" / "torchrun_sigabrt_misaligned_address_rank6.log").read_text()
    rows = _placed(_topology(text), "failure_table")
    assert (rows[6].host, rows[6].pid, rows[6].extra["local_rank"]) == ("zkrh-58", 1246013, 6)


def test_printed_os_environ_is_an_environment_dump() -> None:
    """A job printing ``os.environ`` (https://github.com/Lightning-AI/pytorch-lightning/issues/16236)."""
    text = (" 'SLURM_JOB_ID': '7099018',\n 'SLURM_LOCALID': '0',\n 'SLURM_NODEID': '0',\n"
            " 'SLURM_NODELIST': 'eu-g4-015',\n 'SLURM_PROCID': '0',\n 'SLURM_STEP_GPUS': '2,3',\n")
    rows = _placed(_topology(text, host="eu-g4-015"), "environment")
    assert (rows[0].host, rows[0].job, rows[0].extra["local_rank"]) == ("eu-g4-015", "7099018", 0)


def test_fairseq_initialized_host_lines() -> None:
    """https://github.com/facebookresearch/metaseq/pull/291"""
    text = ("2022-08-05 08:44:41 | INFO | metaseq.distributed.utils | initialized host fairwus3-1-htc-337 as rank 0\n"
            "2022-08-05 08:44:41 | INFO | metaseq.distributed.utils | initialized host fairwus3-1-htc-339 as rank 16\n")
    rows = _placed(_topology(text), "trainer_log")
    assert {r: row.host for r, row in rows.items()} == {0: "fairwus3-1-htc-337", 16: "fairwus3-1-htc-339"}


def test_an_environment_dump_names_the_owner_of_the_unprefixed_lines() -> None:
    """A rank's own log without NCCL init lines: its dump says whose traceback follows."""
    text = ("SLURM_PROCID=3\nSLURMD_NODENAME=node04\n"
            "2025-03-10 03:47:20,970 - ERROR - RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    ctx = ParseContext(mtime=datetime(2026, 11, 29, tzinfo=timezone.utc))
    events = [r for r in nccl.parse("nccl_log", io.BytesIO(text.encode()), ctx) if isinstance(r, Event)]
    assert [(e.kind, e.rank) for e in events] == [("cuda_error", 3)]
    two = text.replace("SLURMD_NODENAME=node04", "SLURM_PROCID=4")
    events = [r for r in nccl.parse("nccl_log", io.BytesIO(two.encode()), ctx) if isinstance(r, Event)]
    assert [e.rank for e in events] == [None], "two dumps in one file name no owner"


def test_srun_task_over_torchrun_numbers_a_node_not_a_rank() -> None:
    """``srun -l torchrun --nproc-per-node 8 ...``: srun's task 1 is the second node's agent, its worker
    ``[default3]:`` is local rank 3 there (global rank 11 on 8 GPUs a node), so neither the NCCL header nor
    the srun label may call it rank 1; srun's task alone (``srun -l python train.py``) still is the rank."""
    assert _placed(_topology(f"1: [default3]:{WARN}\n"), "nccl_header") == {}
    assert _placed(_topology(f"1: [default3]:{WARN}\n", name="slurm-91842.out"), "srun_label") == {}
    assert set(_placed(_topology(f"1: {WARN}\n"), "nccl_header")) == {1}


def test_mpirun_rank_over_torchrun_is_not_the_lines_rank() -> None:
    assert _placed(_topology(f"[1,2]<stderr>:[default3]:{WARN}\n"), "nccl_header") == {}
    assert set(_placed(_topology(f"[1,2]<stderr>:{WARN}\n"), "nccl_header")) == {2}
