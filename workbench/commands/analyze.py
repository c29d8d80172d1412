"""Walk the layered playbook over a bundle: layer verdicts, ranked root-cause hypotheses with their
evidence lines, and the first anomaly. --json prints the analyze object of docs/cli.md."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import TYPE_CHECKING

from workbench.commands._args import positive_int
from workbench.table import printable

if TYPE_CHECKING:
    from workbench.analysis.findings import Analysis

NAME = "analyze"
HELP = "playbook checks and ranked root-cause hypotheses"
WORKLOAD_CHOICES = ("training", "inference", "mixed", "unknown")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("--json", action="store_true", help="print the analysis as one JSON object")
    parser.add_argument("--workload", choices=WORKLOAD_CHOICES, metavar="W",
                        help="use this playbook instead of the detected one (training, inference, mixed, unknown)")
    parser.add_argument("--top", type=positive_int, default=5, metavar="N", help="hypotheses to print (text output)")
    parser.add_argument("--history", metavar="DIR",
                        help="say which culprits the incident history in DIR has seen before (default $GPUWB_HISTORY)")
    parser.add_argument("--baseline", metavar="FILE",
                        help="list drift from the accepted baseline FILE (gpuwb baseline save) as evidence")


def run(args: argparse.Namespace) -> int:
    from workbench.analysis.engine import analyze  # deferred: keeps `gpuwb --help` fast
    from workbench.analysis.findings import Analysis
    from workbench.fleet.history import History, history_dir
    from workbench.prevention.baseline import analysis_drift
    from workbench.prevention.baseline import load as load_baseline
    from workbench.store.bundle import Bundle

    history = history_dir(args.history)
    catalog = History.open(history) if history else None  # a bad folder is refused before the analysis runs
    accepted = load_baseline(args.baseline) if args.baseline else None  # so is a bad baseline file
    with Bundle.open(args.bundle) as bundle:
        result = analyze(bundle, workload=args.workload)
        if accepted is not None:
            result["baseline_drift"] = analysis_drift(bundle, accepted, result)
        if catalog is not None:
            result["seen_before"] = catalog.seen_before_bundle(bundle, result)
    if args.json:
        sys.stdout.write(json.dumps(result, default=str) + "\n")
    else:
        sys.stdout.write(printable(render(Analysis.from_json(result), top=args.top)))
    return 0


_MARK = {"fault": "FAULT", "suspect": "suspect", "clear": "clear", "no_evidence": "-"}


def render(result: Analysis, *, top: int = 5) -> str:
    """The analysis as a responder reads it in a terminal."""
    from workbench.times import iso

    out: list[str] = []
    start, end = result.window
    out.append(f"Workload: {result.workload} ({result.playbook_title}), impact: {result.impact}; "
               f"window {iso(start) or '?'} .. {iso(end) or '?'}")
    if result.clock_offsets:
        out.append("Clock offsets applied: " + ", ".join(f"{h} {s:+.1f}s" for h, s in result.clock_offsets.items()))
    first = result.first_anomaly
    if first:
        out.append(f"First anomaly: {iso(first.ts)} {first.host or '-'} [{first.layer}] {first.kind}: "
                   f"{first.text[:160]}")
    else:
        out.append("First anomaly: none found")
    out.append("")
    out.append("Stage 0 (stop the loss, keep the scene):")
    for step in result.stage0:
        out.append(f"  [{step.status:>9}] {step.title}")
        for ev in step.evidence[:3]:
            out.append(f"              {ev['ts'] or '?'} {ev['host'] or '-'}: {(ev['text'] or '')[:110]}")
    out.append("")
    out.append("Layers:")
    for layer, findings in result.layer_findings.items():
        out.append(f"  {layer:<16} {_MARK[result.layer_verdicts.get(layer, 'no_evidence')]}")
        for finding in findings:
            check = result.check(finding.check)
            verdict = check.verdict if check else ""
            if finding.rows or verdict in ("fault", "suspect"):
                out.append(f"      {_MARK.get(verdict, verdict):<8} {finding.title} ({finding.rows} rows)")
    out.append("")
    hyps = result.hypotheses[:top]
    if not hyps or hyps[0].score < 0.2:
        out.append("No root cause stands out (no hypothesis scores 0.2 or more).")
    for h in hyps:
        where = h.host or "-"
        if h.more_places:
            where += f" (and {h.more_places} more places)"
        if h.gpu:
            where += f" {h.gpu}"
        if h.ranks:
            where += f" ranks {','.join(map(str, h.ranks[:8]))}"
        out.append(f"#{h.rank} {h.score:.2f}  {h.layer}/{h.cause}  {where}")
        out.extend(textwrap.wrap(h.summary, width=116, initial_indent="     ", subsequent_indent="     "))
        if h.symptoms:
            out.append(f"     symptoms: {', '.join(h.symptoms)}")
        if h.consequences:
            out.append(f"     led to: {', '.join(h.consequences)}")
        for ev in h.evidence[:6]:
            loc = f"{(ev.artifact or '')[:8]}:{ev.line}" if ev.artifact else ev.source
            out.append(f"       {iso(ev.ts) or '?':<24} {ev.host or '-':<10} {ev.text[:90]}  [{loc}]")
    c = result.confidence
    if c is not None and hyps:
        if c.sure_enough:
            out.append(f"Confidence: {c.label} (calibrated on incidents with a known truth; floor {c.floor:.2f})")
        else:
            rival = f"; runner-up {c.rival()} ({c.runner_up_score:.2f})" if c.rival() else ""
            out.append(f"NOT SURE ({c.label}, below the floor of {c.floor:.2f}){rival}. To tell them apart:")
            out.extend(f"  {t.line}" for t in c.tell_apart)
    if "seen_before" in result.raw:
        from workbench.fleet.history import seen_before_lines

        out.append("")
        out.extend(seen_before_lines(result.raw["seen_before"]))
    if "baseline_drift" in result.raw:
        from workbench.prevention.baseline import drift_lines

        out.append("")
        out.extend(drift_lines(result.raw["baseline_drift"]))
    return "\n".join(out) + "\n"
