"""The first fit of workbench/analysis/calibration.yaml: every drill (cause x workload x seeds) and,
with ``--real``, every real incident of tests/real_incidents, analysed the way ``gpuwb analyze`` does;
each gives one (top-1 raw score, margin over the runner-up, right or not) sample; one without a
hypothesis makes no claim and is left out of the fit (it still counts in the accuracy printed).

Right means the top hypothesis names the truth's cause, its host (when the truth names one) and its
GPU (when the truth names one): the claim the cockpit's headline makes. The samples are kept in a
JSON file (``--samples``) so a refit does not have to analyse everything again; the drill bench
(tests/perf/drill_bench.py) refits the same way on its harder drills.

    python tests/perf/calibration_fit.py [--seeds 1,2,3] [--real] [--samples S.json]
        [--write-calibration workbench/analysis/calibration.yaml]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from collectors.base import normalize_pci
from workbench.analysis.confidence import runner_up, write_calibration
from workbench.analysis.engine import analyze
from workbench.ingest.session import ingest_paths
from workbench.prevention.drill import write
from workbench.prevention.drill.registry import faults
from workbench.store.bundle import Bundle

REAL = Path(__file__).resolve().parents[1] / "real_incidents"


@dataclass
class Sample:
    """One analysed incident: what the engine said first, and whether it was right."""

    name: str
    score: float
    margin: float
    right: bool
    top: str | None


def _sample(name: str, result: dict, cause: str, host: str | None, gpu: str | None) -> Sample:
    hyps = result["hypotheses"]
    if not hyps:
        return Sample(name, 0.0, 0.0, False, None)
    top = hyps[0]
    other = runner_up(hyps)
    right = (top["cause"] == cause and (host is None or top.get("host") == host)
             and (gpu is None or normalize_pci(top.get("gpu")) == normalize_pci(gpu)))
    margin = top["score"] - (other["score"] if other else 0.0)
    return Sample(name, top["score"], round(margin, 3), right, top["cause"])


def drill_samples(seeds: list[int], work: Path) -> list[Sample]:
    """Every cause/workload generator, one drill per seed."""
    out = []
    for cause, workload in faults():
        for seed in seeds:
            written = write(cause, workload, seed, work / f"{cause}-{workload}-{seed}")
            with Bundle.open(written.bundle) as bundle:
                result = analyze(bundle)
            t = written.truth
            out.append(_sample(f"drill {cause}/{workload}/{seed}", result, cause, t.host, t.gpu))
            shutil.rmtree(work / f"{cause}-{workload}-{seed}", ignore_errors=True)
            print(out[-1], file=sys.stderr, flush=True)
    return out


def real_samples(work: Path) -> list[Sample]:
    """Every real incident, its evidence (the folder without case.yaml) ingested and analysed."""
    out = []
    for folder in sorted(p for p in REAL.iterdir() if (p / "case.yaml").is_file()):
        want = yaml.safe_load((folder / "case.yaml").read_text())
        evidence = work / folder.name / "evidence"
        shutil.copytree(folder, evidence, ignore=shutil.ignore_patterns("case.yaml"))
        with Bundle.create(work / folder.name / "incident.duckdb", title=folder.name) as bundle:
            ingest_paths(bundle, [str(evidence)], notice=lambda _m: None)
        with Bundle.open(work / folder.name / "incident.duckdb") as bundle:
            result = analyze(bundle)
        out.append(_sample(f"real {folder.name}", result, want["expected_cause"], None, want.get("expected_gpu")))
        print(out[-1], file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--real", action="store_true", help="also the real incidents of tests/real_incidents")
    ap.add_argument("--samples", type=Path, help="read the samples from this JSON file if it exists, else write them")
    ap.add_argument("--write-calibration", type=Path, help="fit and write the calibration YAML here")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.monotonic()
    if args.samples and args.samples.exists():
        samples = [Sample(**s) for s in json.loads(args.samples.read_text())]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            samples = drill_samples(seeds, Path(tmp))
            if args.real:
                samples += real_samples(Path(tmp))
        if args.samples:
            args.samples.write_text(json.dumps([asdict(s) for s in samples], indent=1) + "\n")
    drills = [s for s in samples if s.name.startswith("drill")]
    reals = [s for s in samples if s.name.startswith("real")]
    for label, group in (("drills", drills), ("real incidents", reals)):
        if group:
            print(f"{label}: top-1 right {sum(s.right for s in group)}/{len(group)}")
    print(f"{len(samples)} samples in {time.monotonic() - started:.0f} s")
    if args.write_calibration:
        claims = [s for s in samples if s.top is not None]  # no hypothesis: no confidence to calibrate
        source = (f"the top hypothesis of {len(drills)} drills (every cause x workload, seeds {args.seeds})"
                  + (f" and {len(reals)} real incidents (tests/real_incidents)" if reals else "")
                  + f"; {len(claims)} of them with a hypothesis")
        write_calibration(args.write_calibration, [(s.score, s.right) for s in claims], source,
                          margins=[(s.margin, s.right) for s in claims])
        print(f"wrote {args.write_calibration}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
