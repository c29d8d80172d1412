"""Following files like ``tail -F``: from the end, partial lines held back, rotation, truncation, restart."""

from __future__ import annotations

import os
import time
from pathlib import Path

from workbench.capture.recorder import followers
from workbench.capture.recorder.followers import FileFollower, GlobFollower


def write(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_starts_at_the_end_and_holds_a_partial_line_back(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("old\n")
    f = FileFollower(str(log), "kernel:x")
    assert f.poll() == []
    write(log, "one\ntw")
    assert f.poll() == ["one"]
    write(log, "o\n")
    assert f.poll() == ["two"]


def test_rotation_and_truncation_start_over_from_the_beginning(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    f = FileFollower(str(log), "kernel:x")
    f.poll()
    write(log, "before rotation\n")
    assert f.poll() == ["before rotation"]
    os.rename(log, tmp_path / "kern.log.1")
    assert f.poll() == [] and f.error
    log.write_text("first of the new file\n")
    assert f.poll() == ["first of the new file"] and f.error == ""
    log.write_text("")
    write(log, "after truncation\n")
    assert f.poll() == ["after truncation"]


def test_a_restart_continues_from_the_saved_offset_of_the_same_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    f = FileFollower(str(log), "kernel:x")
    f.poll()
    write(log, "a\nb\npart")
    assert f.poll() == ["a", "b"]
    saved = f.state()
    write(log, "ial\nc\n")
    again = FileFollower(str(log), "kernel:x", inode=saved["inode"], offset=saved["offset"])
    assert again.poll() == ["partial", "c"]
    other = FileFollower(str(log), "kernel:x", inode=saved["inode"] + 1, offset=saved["offset"])
    assert other.poll() == [], "another file under the same name: start at its end"


def test_glob_follows_files_that_appear_later_from_their_start(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(followers, "REGLOB_S", 0.0)
    (tmp_path / "rank0.log").write_text("old rank0 line\n")
    g = GlobFollower(str(tmp_path / "rank*.log"))
    assert g.poll() == []
    (tmp_path / "rank1.log").write_text("rank1 first line\n")
    write(tmp_path / "rank0.log", "rank0 new\n")
    assert sorted(g.poll()) == [(f"watch:{tmp_path}/rank0.log", "rank0 new"),
                                (f"watch:{tmp_path}/rank1.log", "rank1 first line")]


def test_a_command_follower_reads_its_output_without_blocking() -> None:
    f = followers.CommandFollower(["sh", "-c", "echo 'kernel: one'; printf 'kernel: tw'; sleep 0.3; echo o; sleep 30"],
                                  "kernel:journal")
    try:
        lines: list[str] = []
        for _ in range(40):
            lines += f.poll()
            if len(lines) == 2:
                break
            time.sleep(0.05)
        assert lines == ["kernel: one", "kernel: two"] and f.error == ""
    finally:
        f.close()
    assert f.proc.poll() is not None


def test_a_file_that_appears_after_the_start_is_read_from_its_beginning(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    f = FileFollower(str(log), "kernel:x")
    assert f.poll() == [] and f.error
    log.write_text("first line of a new log\n")
    assert f.poll() == ["first line of a new log"]
