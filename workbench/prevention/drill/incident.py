"""One drill incident while it is being written: its places and times, drawn from the seed, the raw
files' lines, and the truth the responder is scored against.

Everything that varies comes from one ``random.Random(seed)``: host names and count, GPUs per host
and their PCI bus ids, the culprit, the dates, the benign noise. Nothing reads the clock, so the
same cause, workload and seed always write the same bytes.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from workbench.times import iso

BUS_POOL = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
"""PCI buses of the eight GPUs of an HGX H100 board, as nvidia-smi and the kernel name them."""
HOST_STEMS = ("node", "gpu", "hgx", "dgx", "trn")


@dataclass
class Truth:
    """What really happened: written to answer.json, never among the raw files."""

    cause: str
    layer: str
    workload: str
    seed: int
    host: str | None
    gpu: str | None
    rank: int | None
    injected_at: datetime
    detected_at: datetime
    title: str
    first_anomaly_at: datetime | None = None
    """The first abnormal sign in the evidence (the first link of the chain: the driver upgrade before
    Fabric Manager failed, the first slow step of the rank that later stalls), what ``analyze``'s
    ``first_anomaly`` should name; the injection time when the generator names nothing earlier."""
    level: str = "default"
    """The drill level (:data:`workbench.prevention.drill.distractors.LEVELS`) the evidence was written at."""
    distractors: list[dict[str, Any]] = field(default_factory=list)
    """What the level added, removed or shifted (name, description, details such as each skewed host's
    offset): the times above stay on the reference clock whatever a skewed host's lines say."""

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "layer": self.layer, "workload": self.workload, "seed": self.seed,
                "host": self.host, "gpu": self.gpu, "rank": self.rank,
                "injected_at": iso(self.injected_at, "microseconds"),
                "detected_at": iso(self.detected_at, "microseconds"), "title": self.title,
                "first_anomaly_at": iso(self.first_anomaly_at or self.injected_at, "microseconds"),
                "level": self.level, "distractors": self.distractors}


@dataclass
class Drill:
    """The incident under construction: generators add lines to ``files`` and set the truth."""

    cause: str
    workload: str
    seed: int
    rng: random.Random
    hosts: list[str]
    buses: list[str]
    start: datetime
    fault: datetime
    culprit: str
    local: int
    job: int
    files: dict[str, list[str]] = field(default_factory=dict)
    """Raw files built line by line (logs), by path under raw/."""
    texts: dict[str, str] = field(default_factory=dict)
    """Raw files written whole (snapshots, JSON), by path under raw/."""
    title: str = ""
    detected: datetime | None = None
    first_sign: datetime | None = None
    """When the first abnormal line of the evidence is stamped, where that is not ``fault`` (a change
    hours before the failure, a slow step minutes before the timeout); generators set it."""
    place_gpu: bool = True
    """Whether the truth names the culprit GPU (a cause that lives on one GPU and shows it)."""
    place_host: bool = True
    """Whether the truth names the culprit host; not for a cause of the whole job or fleet."""
    level: str = "default"
    distractors: list[dict[str, Any]] = field(default_factory=list)
    """What the level's distractors did, for the truth (see :class:`Truth`)."""

    @classmethod
    def draw(cls, cause: str, workload: str, seed: int) -> Drill:
        rng = random.Random(f"{cause}/{workload}/{seed}")
        stem = rng.choice(HOST_STEMS)
        first = rng.randint(1, 60)
        count = rng.randint(2, 4)
        hosts = [f"{stem}{first + i:02d}" for i in range(count)]
        buses = sorted(rng.sample(BUS_POOL, rng.choice((2, 4))))
        start = datetime(2026, rng.randint(1, 11), rng.randint(1, 27), rng.randint(0, 20), rng.randint(0, 59),
                         rng.randint(0, 59), tzinfo=timezone.utc)
        fault = start + timedelta(minutes=rng.randint(40, 150), seconds=rng.randint(0, 59),
                                  microseconds=rng.randint(0, 999_999))
        return cls(cause=cause, workload=workload, seed=seed, rng=rng, hosts=hosts, buses=buses, start=start,
                   fault=fault, culprit=rng.choice(hosts), local=rng.randrange(len(buses)),
                   job=rng.randint(40_000, 99_999))

    # -- places ------------------------------------------------------------------------------
    @property
    def gpus_per_host(self) -> int:
        return len(self.buses)

    @property
    def nranks(self) -> int:
        return len(self.hosts) * self.gpus_per_host

    @property
    def rank(self) -> int:
        """The culprit's global rank (the rank on the culprit GPU)."""
        return self.hosts.index(self.culprit) * self.gpus_per_host + self.local

    @property
    def gpu(self) -> str:
        """The culprit GPU's PCI bus id, ``0000:5d:00.0``."""
        return f"0000:{self.buses[self.local]}:00.0"

    def host_of(self, rank: int) -> str:
        return self.hosts[rank // self.gpus_per_host]

    def pid(self, rank: int) -> int:
        return 3100 + (self.job % 500) * 40 + rank * 7

    def ip(self, host: str) -> str:
        return f"10.{10 + self.job % 5}.{self.job % 200}.{11 + self.hosts.index(host)}"

    def hostlist(self) -> str:
        """The hosts as Slurm prints a node list: ``node[05-07]``."""
        stem = self.hosts[0].rstrip("0123456789")
        return f"{stem}[{self.hosts[0][len(stem):]}-{self.hosts[-1][len(stem):]}]"

    def at(self, seconds: float, base: datetime | None = None) -> datetime:
        return (base or self.fault) + timedelta(seconds=seconds)

    # -- evidence ----------------------------------------------------------------------------
    def add(self, rel: str, *lines: str) -> None:
        """Append lines to a raw file (created on first use)."""
        self.files.setdefault(rel, []).extend(lines)

    def truth(self, layer: str) -> Truth:
        """The truth of the incident as built; ``layer`` is the cause's layer in the catalog."""
        return Truth(cause=self.cause, layer=layer, workload=self.workload, seed=self.seed,
                     host=self.culprit if self.place_host else None,
                     gpu=self.gpu if self.place_gpu and self.place_host else None,
                     rank=self.rank if self.workload == "training" and self.place_host else None,
                     injected_at=self.fault, detected_at=self.detected or self.fault, title=self.title,
                     first_anomaly_at=self.first_sign or self.fault, level=self.level,
                     distractors=list(self.distractors))

    def write(self, raw: Path, mtime: datetime) -> list[Path]:
        """Write every raw file under ``raw``, each stamped with the capture time (same bytes every run)."""
        written = []
        contents = {rel: "\n".join(lines) + "\n" for rel, lines in self.files.items()}
        contents.update(self.texts)
        for rel in sorted(contents):
            path = raw / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(contents[rel], encoding="utf-8")
            os.utime(path, (mtime.timestamp(), mtime.timestamp()))
            written.append(path)
        return written
