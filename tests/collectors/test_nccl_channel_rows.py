"""A bare channel line read with one ``group()`` call gives the rows the former per-field reading gave.

The reference below is the former ``_Reader._channel`` verbatim (a generator decoding each field after a
second lookup); the parser runs once with it and once as it is, on every NCCL log of the corpus and on
synthetic rank logs whose channel lines go both ways (``[send]``/``[receive]``, and none).
"""

from __future__ import annotations

import io
import re

import pytest

from collectors import nccl
from collectors.base import ParseContext
from collectors.nccl.reader import Reader
from tests.conftest import CORPUS


def _reference_channel(self: Reader, m: re.Match[bytes]) -> None:
    host = m.group("host").decode("utf-8", "replace")
    proc = self._proc(host, int(m.group("pid")))
    if proc is not None:
        if len(self.hosts) < 4096:
            self.hosts.add(host)
        self._add_channel(proc, *(m.group(k).decode() if m.group(k) else None
                                  for k in ("ch", "src", "dst", "via", "dir")))


def _rows(data: bytes, name: str) -> list[str]:
    return [repr(row) for row in nccl.parse("nccl_log", io.BytesIO(data), ParseContext(source_name=name))]


def _inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    from tests.data.nccl_multirank import write_job

    found = {p.name: p.read_bytes() for p in sorted((CORPUS / "nccl").iterdir()) if p.is_file()}
    made = tmp_path_factory.mktemp("ranks")
    write_job(made, hosts=2, gpus_per_host=2, seq=900_001, straggler=1, filler_bytes=20_000, per_host=False)
    found.update({p.name: p.read_bytes() for p in sorted(made.rglob("*.log"))})
    return found


def test_channel_rows_match_the_former_reading(tmp_path_factory, monkeypatch):
    inputs = _inputs(tmp_path_factory)
    now = {name: _rows(data, name) for name, data in inputs.items()}
    monkeypatch.setattr(Reader, "_channel", _reference_channel)
    before = {name: _rows(data, name) for name, data in inputs.items()}
    assert now == before
    channels = [row for rows in now.values() for row in rows if "'channels': [{" in row]
    assert channels, "no input carried a channel line"
    assert any("'dir': 'receive'" in row for row in channels)
