"""How often the engine is right on its own drills: cause, host, GPU and first anomaly, against a
same-run baseline, with the calibration of its top-1 score (issue 24, "Done when").

Every cause of the catalog with a drill generator, on each workload it is drilled on, for seeds 1..N and
each drill level asked, is written into a temporary folder (``gpuwb drill``), analysed as ``gpuwb
analyze`` does, and compared with its ``answer.json``. The drills are the measure because their truth
is exact; the real-incident tests (``--real``) add the cases whose truth a thread concluded.

What counts as right (``judge``):

- **cause**: the first hypothesis names the truth's cause.
- **host**: the first hypothesis names the truth's host; not counted where the truth names none (a
  cause of the whole job or fleet). Judged apart from the cause: it measures localisation.
- **GPU**: the first hypothesis names the truth's PCI bus id (any spelling, ``normalize_pci``); only
  counted where the truth names a GPU.
- **first anomaly**: ``first_anomaly.ts`` is within the tolerance of the truth's ``first_anomaly_at``:
  1 s when an evidence line is stamped within 1 s of the truth's time (the truth falls on a line the
  engine could name); otherwise the truth falls between lines (a fault seen only in sampled values,
  or first logged a little later) and the evidence cannot place it finer than one scrape interval,
  which is the tolerance. The scrape interval is the median step between the samples of the bundle's
  sampled series (``series`` rows by host, name and labels; ``gpu_sample`` rows by host and GPU)
  that bracket the truth's time, within an hour either side, on the truth's host where any of its
  series do, else on any host; the finest such series sets it. Where no series brackets the truth's
  time, or none can tell its step, it is 30 s (``DEFAULT_SCRAPE_S``, the usual Prometheus and DCGM
  scrape). "Lines" are the ``event`` rows of the evidence, not the ones the workbench derived
  itself (``ts_origin = 'derived'``); each host's times are read through the analysis'
  ``clock_offsets``, as the engine reads them. No first anomaly named is wrong.
- **all**: right on every criterion counted for that drill.

The baseline, measured on the same bundles in the same run, is "the loudest line": the playbook's
checks are evaluated exactly as the engine evaluates them, and the single strongest cause row among
them (ties: the earliest, then by artifact and line) is taken as the answer, its cause, host and GPU;
its first anomaly is the earliest row, of any cause, at or above its check's ``suspect`` threshold,
at its raw time. No ranking, no symptoms explained, no chains, no clock correction: what a responder
reading the reddest lines would say.

The calibration table bins the top-1 score of every drill (and real incident, with ``--real``): a
top-1 answer is right when it names the truth's cause and, where the truth names them, its host and
GPU. ``--write-calibration PATH`` hands those pairs to ``workbench.analysis.confidence``.

    python tests/perf/drill_bench.py [--seeds 10] [--levels default,hard,hardest] [--quick]
        [--cause C]... [--workload W] [--jobs 2] [--json PATH] [--real] [--write-calibration PATH]

Results are sorted before printing, so ``--jobs`` changes the time taken, never the table.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from statistics import median
from typing import Any

import duckdb
import yaml

from collectors.base import normalize_pci
from workbench.analysis.engine import analyze
from workbench.analysis.playbook import Presence, evaluate_check, load_playbook, prepare
from workbench.analysis.workload import detect_workload
from workbench.store.bundle import Bundle
from workbench.table import format_table

EXACT_S = 1.0
"""A first anomaly this close to the truth's is the same moment (log granularity, rounding)."""
DEFAULT_SCRAPE_S = 30.0
"""The scrape interval when the bundle cannot tell one: the usual Prometheus and DCGM exporter scrape."""
NEAR_S = 3600.0
"""Samples this far either side of the truth's time are the ones whose step is the scrape interval there."""
DEFAULT_LEVEL = "default"
KNOWN_LEVELS = ("default", "hard", "hardest")
"""The drill levels of issue 24, used when the drill package declares none itself (``LEVELS``)."""
BINS = ((0.0, 0.2), (0.2, 0.35), (0.35, 0.5), (0.5, 0.65), (0.65, 0.8), (0.8, 1.0))
"""Top-1 score bins of the calibration table; each is [low, high), the last one includes 1.0."""
SURE = 0.5
"""The score at and above which issue 24 wants the top-1 answer right at least 95 % of the time."""
REAL = Path(__file__).resolve().parents[1] / "real_incidents"


class BenchError(Exception):
    """A request this checkout cannot run (a drill level it does not have): one line, exit 2."""


# -- judging -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sampling:
    """What the bundle says around the truth's moment: whether a line falls on it, and the scrape
    interval of the sampled series there (None when no series can tell one)."""

    on_line: bool = True
    interval_s: float | None = None

    @property
    def tolerance_s(self) -> float:
        if self.on_line:
            return EXACT_S
        return max(EXACT_S, self.interval_s or DEFAULT_SCRAPE_S)


@dataclass(frozen=True)
class Verdict:
    """One answer (the engine's or the baseline's) judged against one truth; None is "not counted"."""

    cause: bool
    host: bool | None
    gpu: bool | None
    first: bool | None
    named_cause: str | None
    named_host: str | None
    named_gpu: str | None
    named_first: str | None
    named_first_kind: str | None
    score: float
    margin: float
    """The top-1 score's lead over the runner-up (another cause, or the same at another host)."""
    calibrated: float | None
    """What the cockpit shows: ``analyze``'s ``confidence.calibrated`` (None for the baseline)."""
    first_off_s: float | None
    tolerance_s: float

    @property
    def all(self) -> bool:
        return all(v is not False for v in (self.cause, self.host, self.gpu, self.first))

    @property
    def answer(self) -> bool:
        """Right as an answer a responder acts on: the cause, at the truth's place where it has one."""
        return self.cause and self.host is not False and self.gpu is not False

    def misses(self) -> list[str]:
        return [name for name, v in (("cause", self.cause), ("host", self.host), ("GPU", self.gpu),
                                     ("first anomaly", self.first)) if v is False]


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time (``Z`` or an offset; naive is UTC) or a datetime, as an aware UTC datetime."""
    if value is None or value == "":
        return None
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def judge(result: dict[str, Any], truth: dict[str, Any], sampling: Sampling | None = None) -> Verdict:
    """``result`` (``analyze``'s object, or the baseline's of the same shape: ``hypotheses`` best first
    and ``first_anomaly``) against ``truth`` (an ``answer.json``); see the module's rules."""
    sampling = sampling or Sampling()
    hypotheses = result.get("hypotheses") or []
    top = hypotheses[0] if hypotheses else {}
    named_gpu = normalize_pci(top.get("gpu")) or top.get("gpu")
    host = None if truth.get("host") is None else top.get("host") == truth["host"]
    gpu = None if truth.get("gpu") is None else named_gpu == normalize_pci(truth["gpu"])
    want = parse_time(truth.get("first_anomaly_at") or truth.get("injected_at"))
    anomaly = result.get("first_anomaly") or {}
    named = anomaly.get("ts")
    got = parse_time(named)
    off = None if want is None or got is None else (got - want).total_seconds()
    first = None if want is None else off is not None and abs(off) <= sampling.tolerance_s
    other = next((h for h in hypotheses[1:] if h.get("cause") != top.get("cause") or h.get("host") != top.get("host")),
                 None)
    score = float(top.get("score") or 0.0)
    confidence = result.get("confidence") or {}
    return Verdict(cause=bool(top) and top.get("cause") == truth.get("cause"), host=host, gpu=gpu, first=first,
                   named_cause=top.get("cause"), named_host=top.get("host"), named_gpu=named_gpu,
                   named_first=named, named_first_kind=anomaly.get("kind"), score=score,
                   margin=round(score - float(other.get("score") or 0.0) if other else score, 3),
                   calibrated=confidence.get("calibrated"), first_off_s=off, tolerance_s=sampling.tolerance_s)


def sampling_at(con: duckdb.DuckDBPyConnection, truth: dict[str, Any],
                offsets: dict[str, float] | None = None) -> Sampling:
    """Whether an evidence line falls within 1 s of the truth's first anomaly, and the scrape interval of
    the sampled series around it (the module's rule). ``offsets``: host -> seconds the engine subtracts
    from that host's times (``analyze``'s ``clock_offsets``)."""
    want = parse_time(truth.get("first_anomaly_at") or truth.get("injected_at"))
    if want is None:
        return Sampling()
    offsets = offsets or {}
    moment = want.replace(tzinfo=None)
    spread = max((abs(v) for v in offsets.values()), default=0.0)
    lo, hi = moment - timedelta(seconds=EXACT_S + spread), moment + timedelta(seconds=EXACT_S + spread)
    lines = con.execute("SELECT host, ts FROM event WHERE ts BETWEEN ? AND ? AND coalesce(ts_origin, '') <> 'derived'",
                        [lo, hi]).fetchall()
    on_line = any(abs(_seconds(ts, host, offsets) - _seconds(moment)) <= EXACT_S for host, ts in lines)
    return Sampling(on_line=on_line, interval_s=_scrape_interval(con, moment, truth.get("host"), offsets))


def _seconds(ts: datetime, host: str | None = None, offsets: dict[str, float] | None = None) -> float:
    return ts.replace(tzinfo=timezone.utc).timestamp() - (offsets or {}).get(host or "", 0.0)


_SAMPLED = (
    "SELECT host, name || coalesce(CAST(labels AS VARCHAR), '') AS key, ts FROM series",
    "SELECT host, gpu AS key, ts FROM gpu_sample",
)
"""The sampled series of a bundle, one key per series: metric points by name and labels, GPU samples by GPU."""


def _scrape_interval(con: duckdb.DuckDBPyConnection, moment: datetime, host: str | None,
                     offsets: dict[str, float]) -> float | None:
    """The finest median step of the sampled series that bracket ``moment`` (on ``host`` when any of
    its series do); None when none does or none can tell its step."""
    at = _seconds(moment)
    found: dict[bool, list[float]] = {True: [], False: []}
    for sql in _SAMPLED:
        try:
            rows = con.execute(f"SELECT host, key, list(DISTINCT ts ORDER BY ts) FROM ({sql}) s "
                               "WHERE ts IS NOT NULL GROUP BY host, key").fetchall()
        except duckdb.CatalogException:  # a bundle of an older schema without that table
            continue
        for series_host, _, stamps in rows:
            times = [_seconds(ts, series_host, offsets) for ts in stamps]
            if not times or not times[0] <= at <= times[-1]:
                continue
            near = [t for t in times if abs(t - at) <= NEAR_S]
            steps = [b - a for a, b in zip(near, near[1:]) if b > a]
            if steps:
                found[series_host is not None and series_host == host].append(median(steps))
    pool = found[True] or found[False]
    return min(pool) if pool else None


# -- the baseline ------------------------------------------------------------------------------
def loudest(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The "loudest line" answer (the module's baseline) in ``analyze``'s shape: the strongest cause row
    of the playbook's checks as the one hypothesis, the earliest suspect row as the first anomaly."""
    prepare(con)
    workload, _ = detect_workload(con)
    presence = Presence.of(con)
    results = [evaluate_check(con, check, presence) for check in load_playbook(workload).checks()]
    rows = [row for res in results if res.check.role == "cause" for row in res.rows]
    suspects = [row for res in results if res.check.role == "cause" for row in res.rows
                if row["strength"] >= res.check.suspect and row.get("ts") is not None]
    out: dict[str, Any] = {"hypotheses": [], "first_anomaly": None}
    if rows:
        top = min(rows, key=lambda r: (-r["strength"], r.get("ts") is None, r.get("ts") or datetime.max,
                                       r.get("artifact") or "", r.get("line") or 0))
        out["hypotheses"] = [{"cause": top.get("cause"), "host": top.get("host"), "gpu": top.get("gpu"),
                              "score": round(float(top["strength"]), 3)}]
    if suspects:
        first = min(suspects, key=lambda r: (r["ts"], r.get("artifact") or "", r.get("line") or 0))
        out["first_anomaly"] = {"ts": first["ts"].replace(tzinfo=timezone.utc).isoformat().replace("+00:00", "Z"),
                                "host": first.get("host"), "kind": first.get("kind")}
    return out


# -- running -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    cause: str
    workload: str
    seed: int
    level: str = DEFAULT_LEVEL

    @property
    def name(self) -> str:
        return f"{self.cause}/{self.workload}/seed {self.seed}/{self.level}"


def drill_levels() -> tuple[str, ...] | None:
    """The levels this checkout's drills take (``write(..., level=)``), or None when ``write`` has no
    ``level`` (a checkout from before harder drills)."""
    from workbench.prevention import drill

    if "level" not in inspect.signature(drill.write).parameters:
        return None
    return tuple(getattr(drill, "LEVELS", KNOWN_LEVELS))


def _no_level(level: str) -> BenchError:
    return BenchError(f"this checkout's drills have no level {level}")


def write_drill(task: Task, out: Path) -> Any:
    """``gpuwb drill``'s writer, passed ``level=`` only for a level other than the default, so the bench
    runs on a checkout whose drills have no levels; a TypeError about it is that one-line error."""
    from workbench.prevention.drill import write

    if task.level == DEFAULT_LEVEL:
        return write(task.cause, task.workload, task.seed, out)
    try:
        return write(task.cause, task.workload, task.seed, out, level=task.level)
    except TypeError as exc:
        if "level" in str(exc):
            raise _no_level(task.level) from None
        raise


def run_drill(task: Task) -> dict[str, Any]:
    """One drill written, analysed, and judged with the baseline beside it: the bench's JSON row."""
    row: dict[str, Any] = {"cause": task.cause, "workload": task.workload, "seed": task.seed, "level": task.level}
    with tempfile.TemporaryDirectory(prefix="gpuwb-drill-bench-") as tmp:
        try:
            written = write_drill(task, Path(tmp) / "drill")
            truth = json.loads((Path(tmp) / "drill" / "answer.json").read_text(encoding="utf-8"))
            with Bundle.open(written.bundle) as bundle:
                result = analyze(bundle)
                sampling = sampling_at(bundle.con, truth, result.get("clock_offsets"))
                base = loudest(bundle.con)
        except BenchError:
            raise
        except Exception as exc:  # noqa: BLE001  (a drill that crashes is a measured failure, listed)
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            return row
    row["truth"] = {k: truth.get(k) for k in ("cause", "host", "gpu", "rank", "first_anomaly_at")}
    row["sampling"] = {"on_line": sampling.on_line, "interval_s": sampling.interval_s}
    row["engine"] = asdict(judge(result, truth, sampling))
    row["baseline"] = asdict(judge(base, truth, sampling))
    return row


def run_real(folder: Path) -> dict[str, Any]:
    """One real-incident case as tests/real_incidents runs it (``gpuwb ingest`` of the folder without
    its case.yaml, then ``gpuwb analyze --json``): its top-1 score and whether the answer is right."""
    from workbench.cli import main as gpuwb

    want = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    row: dict[str, Any] = {"case": folder.name, "expected": want["expected_cause"],
                           "expected_gpu": want.get("expected_gpu")}
    with tempfile.TemporaryDirectory(prefix="gpuwb-real-bench-") as tmp:
        evidence = Path(tmp) / "evidence"
        shutil.copytree(folder, evidence, ignore=shutil.ignore_patterns("case.yaml"))
        bundle = Path(tmp) / "incident.duckdb"
        out = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            code = gpuwb(["ingest", str(bundle), str(evidence)])
        if code == 0:
            with redirect_stdout(out), redirect_stderr(io.StringIO()):
                code = gpuwb(["analyze", str(bundle), "--json"])
    if code != 0:
        return {**row, "error": f"gpuwb exited {code}", "score": 0.0, "right": False}
    result = json.loads(out.getvalue())
    verdict = judge(result, {"cause": row["expected"], "gpu": row["expected_gpu"]})
    return {**row, "named": verdict.named_cause, "named_gpu": verdict.named_gpu, "score": verdict.score,
            "margin": verdict.margin, "calibrated": verdict.calibrated, "hypothesis": bool(result["hypotheses"]),
            "right": verdict.answer}


def _run(what: Any, items: Sequence[Any], jobs: int, label: str) -> list[Any]:
    """``what`` over ``items`` on ``jobs`` processes, in the items' order; progress on stderr, a tenth at a time."""
    step = max(1, len(items) // 10)
    out: list[Any] = []
    with multiprocessing.Pool(min(jobs, len(items))) if jobs > 1 and len(items) > 1 else _Inline() as pool:
        for n, row in enumerate(pool.imap(what, items, chunksize=1), start=1):
            out.append(row)
            if n % step == 0 or n == len(items):
                print(f"drill_bench: {n}/{len(items)} {label}", file=sys.stderr, flush=True)
    return out


class _Inline:
    """A one-process stand-in for ``multiprocessing.Pool`` (``--jobs 1``): nothing to spawn or pickle."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def imap(self, what: Any, items: Iterable[Any], chunksize: int = 1) -> Iterable[Any]:
        return map(what, items)


# -- reporting ---------------------------------------------------------------------------------
CRITERIA = (("cause", "cause"), ("host", "host"), ("GPU", "gpu"), ("first anomaly", "first"), ("all", "all"))


def _judged(verdict: dict[str, Any], key: str) -> bool | None:
    if key == "all":
        return all(verdict[k] is not False for k in ("cause", "host", "gpu", "first"))
    return verdict[key]


def _share(right: int, n: int) -> str:
    return f"{right}/{n} {100.0 * right / n:5.1f} %" if n else "-"


def accuracy_table(rows: Sequence[dict[str, Any]]) -> str:
    """Engine against baseline on each criterion, over the rows of one level. A drill that crashed
    counts wrong on the cause, the first anomaly and all, and is not counted on host and GPU."""
    lines = []
    for label, key in CRITERIA:
        n = right = base = 0
        for row in rows:
            if "error" in row:
                if key in ("cause", "first", "all"):
                    n += 1
                continue
            got = _judged(row["engine"], key)
            if got is None:
                continue
            n += 1
            right += got
            base += bool(_judged(row["baseline"], key))
        lines.append([label, n, _share(right, n), _share(base, n)])
    return format_table(["criterion", "counted", "engine", "baseline (loudest line)"], lines)


def calibration_pairs(rows: Iterable[dict[str, Any]], real: Iterable[dict[str, Any]] = (),
                      key: str = "score") -> list[tuple[float, bool]]:
    """(top-1 ``key``, right as an answer) for every drill that ran and every real case with a hypothesis
    (an incident the engine names nothing for makes no claim to calibrate). ``key``: ``score`` (raw),
    ``margin`` (over the runner-up) or ``calibrated`` (what the cockpit shows)."""
    pairs = [(row["engine"][key], bool(row["engine"]["cause"] and row["engine"]["host"] is not False
                                       and row["engine"]["gpu"] is not False))
             for row in rows if "error" not in row and row["engine"]["named_cause"] is not None]
    pairs += [(r[key], bool(r["right"])) for r in real if "error" not in r and r.get("hypothesis", True)]
    return [(float(value), right) for value, right in pairs if value is not None]


def calibration_table(pairs: Sequence[tuple[float, bool]]) -> str:
    """n, right and share right per top-1 score bin, then the share right at SURE and above."""
    lines = []
    for lo, hi in BINS:
        inside = [ok for score, ok in pairs if lo <= score < hi or (hi == BINS[-1][1] and score >= hi)]
        lines.append([f"{lo:.2f}-{hi:.2f}", len(inside), sum(inside),
                      f"{100.0 * sum(inside) / len(inside):5.1f} %" if inside else "-"])
    table = format_table(["top-1 score", "n", "right", "share right"], lines)
    return f"{table}\n{_at_least('raw score', pairs)}"


def _at_least(what: str, pairs: Sequence[tuple[float, bool]]) -> str:
    sure = [ok for value, ok in pairs if value >= SURE]
    rate = f"{100.0 * sum(sure) / len(sure):.1f} %" if sure else "-"
    return f"{what} >= {SURE}: right {rate} ({sum(sure)} of {len(sure)}; issue 24 wants >= 95 %)"


def miss_line(row: dict[str, Any]) -> str | None:
    """What the engine named on a drill it got wrong on any criterion, in one line; None when right."""
    name = f"{row['cause']}/{row['workload']}/seed {row['seed']}/{row['level']}"
    if "error" in row:
        return f"{name}: drill failed: {row['error']}"
    v = row["engine"]
    if not Verdict(**v).misses():
        return None
    place = "".join(f" @{p}" for p in (v["named_host"], v["named_gpu"]) if p)
    truth = row["truth"]
    want = "".join(f" @{p}" for p in (truth.get("host"), truth.get("gpu")) if p)
    off = ("none named" if v["first_off_s"] is None
           else f"{v['named_first']} {v['named_first_kind'] or '-'}, {v['first_off_s']:+.1f} s off "
                f"(tolerance {v['tolerance_s']:g} s)")
    return (f"{name}: wrong {', '.join(Verdict(**v).misses())} -> named {v['named_cause']}{place} "
            f"(score {v['score']:.3f}), first anomaly {off}; truth {truth['cause']}{want} "
            f"at {truth.get('first_anomaly_at')}")


LEVEL_ORDER = {level: n for n, level in enumerate(KNOWN_LEVELS)}


def _order(row: dict[str, Any]) -> tuple:
    return (LEVEL_ORDER.get(row["level"], len(LEVEL_ORDER)), row["level"], row["cause"], row["workload"], row["seed"])


def report(rows: Sequence[dict[str, Any]], real: Sequence[dict[str, Any]] = ()) -> str:
    """The whole printout: a table per level, the calibration table, the misses."""
    rows = sorted(rows, key=_order)
    parts = []
    for level in dict.fromkeys(row["level"] for row in rows):
        mine = [row for row in rows if row["level"] == level]
        pairs = len({(r["cause"], r["workload"]) for r in mine})
        seeds = len({r["seed"] for r in mine})
        parts.append(f"level {level}: {len(mine)} drills ({pairs} cause/workload pairs x {seeds} seeds)\n"
                     + accuracy_table(mine))
    pairs = calibration_pairs(rows, real)
    where = f"{len(pairs) - len(real)} drills" + (f" + {len(real)} real incidents" if real else "")
    parts.append(f"calibration of the top-1 score ({where}; right = cause, and host and GPU where the truth "
                 f"names them)\n" + calibration_table(pairs) + "\n"
                 + _at_least("calibrated confidence (what the cockpit shows)",
                             calibration_pairs(rows, real, "calibrated")))
    if real:
        hits = sum(r["right"] for r in real)
        wrong = [f"  {r['case']}: expected {r['expected']}, named {r.get('named')} ({r['score']:.3f})"
                 + (f" [{r['error']}]" if r.get("error") else "") for r in sorted(real, key=lambda r: r["case"])
                 if not r["right"]]
        parts.append(f"real incidents: top-1 right on {hits} of {len(real)}"
                     + ("\n" + "\n".join(wrong) if wrong else ""))
    misses = [line for line in map(miss_line, rows) if line]
    parts.append(f"misses ({len(misses)} of {len(rows)} drills):" + ("\n" + "\n".join(f"  {m}" for m in misses)
                                                                     if misses else " none"))
    return "\n\n".join(parts)


# -- the command -------------------------------------------------------------------------------
def tasks_for(causes: Sequence[str], workload: str | None, seeds: int, levels: Sequence[str]) -> list[Task]:
    """Every drill to run, in the order they are reported."""
    from workbench.prevention.drill.registry import faults

    pairs = [key for key in faults() if (not causes or key[0] in causes) and (workload is None or key[1] == workload)]
    unknown = sorted(set(causes) - {cause for cause, _ in faults()})
    if unknown:
        raise BenchError(f"no drill for cause {', '.join(unknown)}; see gpuwb drill --list")
    if not pairs:
        raise BenchError(f"no drill for {', '.join(causes) or 'any cause'} on workload {workload}")
    tasks = [Task(cause, wl, seed, level) for level in levels for cause, wl in pairs for seed in range(1, seeds + 1)]
    return sorted(tasks, key=lambda t: _order(asdict(t)))


def choose_levels(asked: str | None, quick: bool) -> list[str]:
    """The levels to run: as asked (each one this checkout's drills have), else all of them (only the
    default where the drills have no levels); ``--quick``: the default."""
    have = drill_levels()
    if asked is None:
        return [DEFAULT_LEVEL] if quick or have is None else list(have)
    levels = [level.strip() for level in asked.split(",") if level.strip()]
    for level in levels:
        if level != DEFAULT_LEVEL and (have is None or level not in have):
            raise _no_level(level)
    return levels


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N per cause and workload (default 10)")
    parser.add_argument("--levels", help="drill levels, comma-separated (default: every level the drills have)")
    parser.add_argument("--quick", action="store_true", help="3 seeds, default level")
    parser.add_argument("--cause", action="append", default=[], help="only this cause (repeatable)")
    parser.add_argument("--workload", choices=("training", "inference"), help="only this workload")
    parser.add_argument("--jobs", type=int, default=2, help="drills run at once (default 2)")
    parser.add_argument("--json", type=Path, help="write every drill's row (and real case's) to PATH")
    parser.add_argument("--real", action="store_true", help="add the real-incident tests to the calibration")
    parser.add_argument("--write-calibration", type=Path, metavar="PATH",
                        help="fit the calibration on these results and write it to PATH")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = 3
    if args.seeds < 1 or args.jobs < 1:
        parser.error("--seeds and --jobs must be 1 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        levels = choose_levels(args.levels, args.quick)
        tasks = tasks_for(args.cause, args.workload, args.seeds, levels)
        writer = None
        if args.write_calibration:
            try:
                from workbench.analysis.confidence import write_calibration as writer
            except ImportError:
                raise BenchError("this checkout has no workbench.analysis.confidence.write_calibration; "
                                 "--write-calibration cannot write") from None
        rows = sorted(_run(run_drill, tasks, args.jobs, "drills"), key=_order)
    except BenchError as exc:
        print(f"drill_bench: {exc}", file=sys.stderr)
        return 2
    cases = sorted(p for p in REAL.iterdir() if (p / "case.yaml").is_file()) if args.real else []
    real = sorted(_run(run_real, cases, args.jobs, "real incidents"), key=lambda r: r["case"])
    print(report(rows, real))
    print(f"\n{len(tasks)} drills{f' and {len(real)} real incidents' if real else ''} "
          f"in {time.perf_counter() - started:.0f} s with {args.jobs} job(s)")
    if args.json:
        args.json.write_text(json.dumps({"drills": rows, "real": real}, indent=1, default=str) + "\n", encoding="utf-8")
    if writer is not None:
        source = (f"tests/perf/drill_bench.py: {len(tasks)} drills, levels {','.join(levels)}, seeds 1-{args.seeds}"
                  + (f", {len(real)} real incidents" if real else ""))
        writer(args.write_calibration, calibration_pairs(rows, real), source,
               margins=calibration_pairs(rows, real, "margin"))
        print(f"calibration written to {args.write_calibration}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
