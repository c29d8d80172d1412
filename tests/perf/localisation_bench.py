"""How often the engine names the right host for a fabric fault, with and without the culprit's own evidence.

The network_fabric_errors training drill flaps one host's IB port: its dmesg says ``Link down``, its
peers' NCCL says ``Got completion from peer 10.x.y.z<port> with status=12``. Each variant takes the
drill's raw evidence and removes what a responder is often not handed: the culprit's kernel log, the
NCCL INFO lines (NCCL_DEBUG unset: no init lines, so no address of any rank), or both.

    python tests/perf/localisation_bench.py             # seeds 1..10
    python tests/perf/localisation_bench.py --seeds 30
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from workbench.analysis.engine import analyze
from workbench.ingest.session import ingest_paths
from workbench.prevention.drill import write
from workbench.store.bundle import Bundle

VARIANTS = (("as written", False, False), ("culprit's dmesg missing", True, False),
            ("no NCCL INFO", False, True), ("both", True, True))


def right_host(seed: int, cause: str, drop_dmesg: bool, strip_info: bool) -> bool:
    """Whether the top hypothesis names the drill's cause on its host."""
    with tempfile.TemporaryDirectory() as tmp:
        written = write(cause, "training", seed, Path(tmp) / "d", ingest=False)
        truth = written.truth.to_json()
        for path in [p for p in written.raw.rglob("*") if p.is_file()]:
            if drop_dmesg and path.name == "dmesg.txt" and path.parent.name == truth["host"]:
                path.unlink()
            elif strip_info:
                lines = path.read_text(errors="replace").splitlines(keepends=True)
                path.write_text("".join(line for line in lines if "NCCL INFO" not in line))
        bundle_path = Path(tmp) / "b.duckdb"
        with Bundle.create(bundle_path, title="bench") as bundle:
            ingest_paths(bundle, [str(written.raw)])
        with Bundle.open(bundle_path) as bundle:
            hypotheses = analyze(bundle)["hypotheses"]
    top = hypotheses[0] if hypotheses else {}
    return top.get("cause") == truth["cause"] and top.get("host") == truth["host"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--cause", default="network_fabric_errors")
    args = parser.parse_args()
    for name, drop, strip in VARIANTS:
        ok = sum(right_host(seed, args.cause, drop, strip) for seed in range(1, args.seeds + 1))
        print(f"{args.cause} training, {name:<24} right cause and host {ok}/{args.seeds}", flush=True)


if __name__ == "__main__":
    main()
