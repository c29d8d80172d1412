"""Storage collector: df, iostat, diskstats, NFS, checkpoint directory and checkpoint-write failures."""

from __future__ import annotations

import io
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import storage
from collectors.base import Event, HostFact, ParseContext, SeriesPoint, Skipped
from collectors.storage import live_capture as storage_capture
from collectors.storage import write_failures as storage_writes
from tests.conftest import ingest_timeline, run_cli

MTIME = datetime(2026, 11, 28, 10, 30, tzinfo=timezone.utc)

DF_P = """Filesystem     1024-blocks      Used Available Capacity Mounted on
/dev/nvme0n1p2   960380628 931568212  28812416      97% /
tmpfs             32768000         0  32768000       0% /dev/shm
/dev/loop3           56832     56832         0     100% /snap/core18/2812
10.0.0.2:/export/ckpt 10737418240 10737418240 0 100% /mnt/ckpt
"""

DF_H_WRAPPED = """Filesystem            Size  Used Avail Use% Mounted on
/dev/mapper/vg_sys-lv_root
                       50G   48G  2.0G  96% /
/dev/sda1             477M  100M  352M  23% /boot
"""

DF_PT = """Filesystem     Type     1024-blocks    Used Available Capacity Mounted on
/dev/loop0     squashfs       64768   64768         0     100% /snap/core20/2015
/dev/md0       xfs       7500000000 7200000000 300000000  96% /raid/checkpoints
"""

DF_I = """Filesystem       Inodes   IUsed  IFree IUse% Mounted on
/dev/nvme1n1   61054976 61054976      0  100% /scratch
"""

IOSTAT_OLD = """Linux 4.15.0-112-generic (gpu-node-03) \t11/28/2026 \t_x86_64_\t(64 CPU)

11/28/2026 10:00:00 AM
avg-cpu:  %user   %nice %system %iowait  %steal   %idle
           2.10    0.00    0.90    0.40    0.00   96.60

Device:        rrqm/s  wrqm/s     r/s     w/s    rkB/s    wkB/s avgrq-sz avgqu-sz   await r_await w_await  svctm  %util
sda              0.00    1.20    0.50    3.10    10.00    60.00    38.89     0.01    2.10    1.00    2.28   0.40   0.15

11/28/2026 10:00:05 AM
avg-cpu:  %user   %nice %system %iowait  %steal   %idle
           1.00    0.00    0.50   35.00    0.00   63.50

Device:        rrqm/s  wrqm/s     r/s     w/s    rkB/s    wkB/s avgrq-sz avgqu-sz   await r_await w_await  svctm  %util
sda              0.00    0.00    0.00   40.00     0.00  5120.00   256.00    31.50  850.00    0.00  850.00  25.00 100.00
"""

DISKSTATS = """# diskstats sample 1 at 2026-11-28T10:00:00+00:00
   8       0 sda 3000 10 240000 1500 2000 50 160000 2000 0 4000 3500 0 0 0 0
 259       0 nvme0n1 1000 0 80000 500 2000 0 160000 3000 0 4000 3500 0 0 0 0
   7       0 loop0 5 0 10 0 0 0 0 0 0 1 0 0 0 0 0
# diskstats sample 2 at 2026-11-28T10:00:01+00:00
   8       0 sda 3004 10 240100 3500 2006 50 160300 5000 2 4900 8500 0 0 0 0
 259       0 nvme0n1 1000 0 80000 500 2000 0 160000 3000 8 5000 11500 0 0 0 0
   7       0 loop0 5 0 10 0 0 0 0 0 0 1 0 0 0 0 0
"""

NFSSTAT = """Client rpc stats:
calls      retrans    authrefrsh
118380     7843       0
Client nfs v3:
null       getattr    setattr    lookup     access     readlink
0       0% 2577   19% 1       0% 24      0% 18      0% 0       0%
"""

MOUNTSTATS = """device sysfs mounted on /sys with fstype sysfs
device /dev/sda1 mounted on / with fstype ext4
device 10.0.0.3:/files mounted on /srv/nfs/files with fstype nfs statvers=1.1
\topts:\trw,vers=3,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys
\tage:\t186
\tcaps:\tcaps=0x1000000f,wtmult=4096,dtsize=1048576,bsize=0,namlen=255
\tsec:\tflavor=1,pseudoflavor=1
\tevents:\t15 45 0 0 55 6 386 0 0 5241 0 0 3 0 44 0 0 44 0 0 0 0 0 0 0 0 0
\tbytes:\t49163927552 0 0 0 41916993536 0 10262313 0
\tRPC iostats version: 1.1  p/v: 100003/3 (nfs)
\txprt:\ttcp 689 1 2 0 0 2826 2818 0 24955 0 10 0 22129
\tper-op statistics
\t        NULL: 1 1 0 44 24 0 0 0 0
\t     GETATTR: 100 100 0 12000 11200 5 300 320 0
\t        READ: 500 520 3 60000 52428800 100 250000 260000 0
\t       WRITE: 200 230 4 52428800 30000 50 400000 410000 0
device 10.0.0.4:/home mounted on /home with fstype nfs4 statvers=1.1
\tper-op statistics
\t        READ: 10 10 0 1200 4096 0 5 6 0
"""

DEEPSPEED_ENOSPC = """[2026-11-28 10:15:02,113] [INFO] [engine.py:3290:_save_checkpoint] Saving model checkpoint: \
/ckpt/global_step1200/mp_rank_00_model_states.pt
Traceback (most recent call last):
  File "/usr/lib/python3.10/site-packages/torch/serialization.py", line 628, in save
    _save(obj, opened_zipfile, pickle_module, pickle_protocol, _disable_byteorder_record)
RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1059577536 vs 1059577424

During handling of the above exception, another exception occurred:

OSError: [Errno 28] No space left on device
"""

CACHE_ENOSPC = """2026-11-28T10:20:00Z worker 3: writing dataset shard cache
OSError: [Errno 28] No space left on device: '/tmp/hf_cache/shard-00017.arrow'
"""


def _rows(kind: str, text: str | bytes, **ctx_args) -> list:
    data = text.encode() if isinstance(text, str) else text
    ctx = ParseContext(host="node01", mtime=MTIME, **ctx_args)
    return list(storage.parse(kind, io.BytesIO(data), ctx))


def _events(rows: list, kind: str) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == kind]


def test_df_p_full_filesystems_skip_snap_loops() -> None:
    assert storage.sniff("df.txt", DF_P) == {"df": 95}
    full = _events(_rows("df", DF_P), "filesystem_full")
    assert [(e.attrs["mount"], e.attrs["use_pct"], e.severity) for e in full] == [
        ("/", 97, "error"), ("/mnt/ckpt", 100, "critical")]
    assert full[0].attrs["filesystem"] == "/dev/nvme0n1p2" and full[0].attrs["avail_kb"] == 28812416
    assert full[0].ts == MTIME and full[0].ts_approx


def test_df_h_wrapped_name_and_typed_and_inode_layouts() -> None:
    wrapped = _events(_rows("df", DF_H_WRAPPED), "filesystem_full")
    assert [(e.attrs["mount"], e.attrs["filesystem"], e.attrs["use_pct"]) for e in wrapped] == [
        ("/", "/dev/mapper/vg_sys-lv_root", 96)]
    typed = _events(_rows("df", DF_PT), "filesystem_full")
    assert [(e.attrs["mount"], e.attrs["fstype"]) for e in typed] == [("/raid/checkpoints", "xfs")]
    inodes = _events(_rows("df", DF_I), "filesystem_full")
    assert inodes[0].attrs["inodes"] is True and inodes[0].attrs["mount"] == "/scratch"
    assert "inodes 100% used" in inodes[0].message


def test_df_in_timeline(tmp_path: Path) -> None:
    path = tmp_path / "evidence" / "node01" / "df-P.txt"
    path.parent.mkdir(parents=True)
    path.write_text(DF_P)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    full = [e for e in events if e["kind"] == "filesystem_full"]
    assert {e["attrs"]["mount"] for e in full} == {"/", "/mnt/ckpt"}
    assert all(e["host"] == "node01" and e["layer"] == "network_storage" for e in full)


def test_iostat_await_against_since_boot_report_not_util() -> None:
    rows = _rows("iostat", IOSTAT_OLD)
    high = _events(rows, "disk_await_high")
    assert len(high) == 1
    event = high[0]
    assert event.host == "gpu-node-03"
    assert event.attrs["device"] == "sda" and event.attrs["column"] == "await"
    assert event.attrs["await_ms"] == 850.0 and event.attrs["baseline_ms"] == 2.10
    assert event.ts == datetime(2026, 11, 28, 10, 0, 5, tzinfo=timezone.utc) and event.ts_approx
    iowait = [p.value for p in rows if isinstance(p, SeriesPoint) and p.name == "cpu.iowait_pct"]
    assert iowait == [0.40, 35.00]
    assert not [r for r in rows if isinstance(r, Skipped)]


def test_iostat_iso_times_are_exact() -> None:
    text = IOSTAT_OLD.replace("11/28/2026 10:00:00 AM", "2026-11-28T10:00:00+0100").replace(
        "11/28/2026 10:00:05 AM", "2026-11-28T10:00:05+0100")
    event = _events(_rows("iostat", text), "disk_await_high")[0]
    assert event.ts == datetime(2026, 11, 28, 9, 0, 5, tzinfo=timezone.utc) and not event.ts_approx


def test_diskstats_interval_await_and_stall() -> None:
    rows = _rows("diskstats", DISKSTATS)
    high = _events(rows, "disk_await_high")
    assert [(e.attrs["device"], e.attrs["ios"]) for e in high] == [("sda", 10)]
    assert high[0].attrs["await_ms"] == 500.0 and round(high[0].attrs["baseline_ms"], 2) == 0.70
    stall = _events(rows, "disk_stall")
    assert [(e.attrs["device"], e.attrs["inflight"], e.attrs["seconds"]) for e in stall] == [("nvme0n1", 8, 1.0)]
    assert stall[0].ts == datetime(2026, 11, 28, 10, 0, 1, tzinfo=timezone.utc)
    devices = {p.labels["device"] for p in rows if isinstance(p, SeriesPoint)}
    assert devices == {"sda", "nvme0n1"}, "loop devices are not disks"


def test_nfsstat_and_mountstats_retransmissions() -> None:
    nfs = _events(_rows("nfsstat", NFSSTAT), "nfs_retrans")
    assert nfs[0].attrs["retrans"] == 7843 and nfs[0].attrs["calls"] == 118380
    mounts = _events(_rows("mountstats", MOUNTSTATS), "nfs_retrans")
    assert len(mounts) == 1, "the clean nfs4 mount and local filesystems give nothing"
    attrs = mounts[0].attrs
    assert (attrs["server"], attrs["mount"]) == ("10.0.0.3", "/srv/nfs/files")
    assert (attrs["retrans"], attrs["timeouts"]) == (50, 7)
    assert attrs["exe_ms"]["READ"] == 520.0 and mounts[0].severity == "error"


def _make_checkpoints(root: Path) -> None:
    now = time.time()
    for step, size, age in ((100, 4096, 7200), (200, 4096, 3600), (300, 0, 60)):
        path = root / f"global_step{step}" / "mp_rank_00_model_states.pt"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (now - age, now - age))
    tmp = root / "global_step300" / "zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp"
    tmp.write_bytes(b"y" * 100)
    os.utime(tmp, (now - 30, now - 30))


def test_checkpoint_listing_last_good_and_partial_files(tmp_path: Path) -> None:
    _make_checkpoints(tmp_path / "ckpt")
    listing = storage_capture.checkpoint_listing(str(tmp_path / "ckpt"))
    assert listing is not None and storage.sniff("x", listing) == {"checkpoint_listing": 90}
    rows = _rows("checkpoint_listing", listing)
    good = _events(rows, "checkpoint_last_good")
    assert len(good) == 1 and good[0].attrs["path"].endswith("global_step200/mp_rank_00_model_states.pt")
    assert 3500 < good[0].attrs["age_s"] < 3700 and good[0].attrs["size"] == 4096
    partial = {Path(e.attrs["path"]).name: e.attrs for e in _events(rows, "checkpoint_partial")}
    assert partial["mp_rank_00_model_states.pt"]["reason"] == "zero bytes"
    assert partial["zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp"]["reason"] == "temporary file"
    assert all(a["newer_than_last_good"] for a in partial.values())


def test_checkpoint_ls_full_iso_listing_and_truncated_sibling() -> None:
    listing = "\n".join([
        "total 52",
        "-rw-r--r-- 1 train train 2147483648 2026-11-28 08:00:01.000000000 +0000 model_step_01000.safetensors",
        "-rw-r--r-- 1 train train 2147483648 2026-11-28 09:00:01.000000000 +0000 model_step_02000.safetensors",
        "-rw-r--r-- 1 train train 2147483648 2026-11-28 10:00:01.000000000 +0000 model_step_03000.safetensors",
        "-rw-r--r-- 1 train train  536870912 2026-11-28 11:00:01.000000000 +0100 model_step_04000.safetensors",
        "drwxr-xr-x 2 train train       4096 2026-11-28 10:00:01.000000000 +0000 logs",
    ]) + "\n"
    assert storage.sniff("ls.txt", listing) == {"checkpoint_listing": 70}
    assert _events(_rows("checkpoint_listing", listing), "checkpoint_last_good")[0].attrs["age_s"] is None, \
        "a handed-over file's mtime is no listing time"
    rows = _rows("checkpoint_listing", listing, captured_at=MTIME)
    good = _events(rows, "checkpoint_last_good")[0]
    assert good.attrs["path"] == "model_step_03000.safetensors"
    assert good.ts == datetime(2026, 11, 28, 10, 0, 1, tzinfo=timezone.utc)
    assert good.attrs["age_s"] == (MTIME - good.ts).total_seconds()
    partial = _events(rows, "checkpoint_partial")
    assert [e.attrs["path"] for e in partial] == ["model_step_04000.safetensors"]
    assert partial[0].attrs["reason"].startswith("smaller than its siblings")
    assert partial[0].ts == datetime(2026, 11, 28, 10, 0, 1, tzinfo=timezone.utc)


def test_capture_with_checkpoint_dir_end_to_end(tmp_path: Path) -> None:
    _make_checkpoints(tmp_path / "ckpt")
    out = tmp_path / "cap.duckdb"
    code, _, err = run_cli("capture", "-o", out, "--only", "storage", "--checkpoint-dir", tmp_path / "ckpt")
    assert code == 0, err
    code, text, _ = run_cli("timeline", out, "--json", "--kind", "checkpoint_last_good")
    assert code == 0
    assert "global_step200" in text and '"ts_origin": "mtime"' in text


def test_checkpoint_write_failures_with_errno_and_context() -> None:
    assert storage.sniff("train.log", DEEPSPEED_ENOSPC) == {"checkpoint_log": 80}
    rows = _rows("checkpoint_log", DEEPSPEED_ENOSPC)
    failed = _events(rows, "checkpoint_write_failed")
    assert [e.attrs["errno"] for e in failed] == [None, "ENOSPC"]
    assert failed[0].attrs["error"] == "unexpected pos 1059577536 vs 1059577424"
    assert failed[1].ts == datetime(2026, 11, 28, 10, 15, 2, 113000, tzinfo=timezone.utc)
    assert failed[1].ts_origin == "neighbour" and failed[1].ts_approx
    other = _events(_rows("checkpoint_log", CACHE_ENOSPC), "storage_error")
    assert len(other) == 1 and other[0].attrs["errno"] == "ENOSPC"
    assert not _events(_rows("checkpoint_log", CACHE_ENOSPC), "checkpoint_write_failed")


def test_write_failure_is_reusable_by_other_collectors() -> None:
    found = storage_writes.write_failure("RuntimeError: write(): fd 29 failed with Input/output error")
    assert found == {"error": "write(): fd 29 failed with Input/output error", "errno": "EIO", "file": None,
                     "checkpoint_api": True}
    assert storage_writes.write_failure("INFO step 100 loss 2.31") is None


def test_since_boot_only_report_needs_an_extreme_await() -> None:
    header = "Device            r/s     w/s  r_await w_await  aqu-sz  %util\n"
    calm = _events(_rows("iostat", header + "nvme0n1  900.0 100.0 0.20 0.10 0.3 100.0\n"), "disk_await_high")
    slow = _events(_rows("iostat", header + "sdb  10.0 5.0 1500.0 900.0 20.0 100.0\n"), "disk_await_high")
    assert calm == [] and slow[0].attrs["baseline_ms"] is None and slow[0].attrs["column"] == "r_await"


REAL_LINES = (DF_P + DF_H_WRAPPED + IOSTAT_OLD + DISKSTATS + NFSSTAT + MOUNTSTATS + DEEPSPEED_ENOSPC).splitlines()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=80)), max_size=40),
       st.sampled_from(storage.KINDS))
def test_mixed_real_and_junk_lines_never_raise(lines: list[str], kind: str) -> None:
    rows = _rows(kind, "\n".join(lines).encode("utf-8", "surrogatepass"))
    assert all(isinstance(r, (Event, HostFact, SeriesPoint, Skipped)) for r in rows)


def test_listing_far_future_and_bad_epochs_are_skipped() -> None:
    rows = _rows("checkpoint_listing", "99999999999999999999 10 f /x/model.pt\n1700000000 10 f /x/model.pt\n")
    good = _events(rows, "checkpoint_last_good")
    assert good and good[0].ts == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)
    assert MTIME - good[0].ts > timedelta(days=365)
