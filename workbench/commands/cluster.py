"""Capture every node of a job at once, through the engines that already reach them.

  gpuwb cluster capture --slurm-job J --out DIR    one `gpuwb capture` per node of job J, through srun
  gpuwb cluster capture --nodes LIST --out DIR     the same for a Slurm host list, outside any job
  gpuwb cluster collect --out DIR (--slurm-job J | --nodes LIST)
                                                   the coverage and merged bundle of bundles already in
                                                   DIR/nodes (written by the Slurm epilog or a Kubernetes Job)
  gpuwb cluster manifest --nodes LIST --image IMG  the Kubernetes Job that captures those nodes

Each node's bundle lands in DIR/nodes/NODE.duckdb (its srun output beside it, NODE.log). The coverage
table names every node: answered, timeout, no answer (down or unreachable), failed. It is written to
DIR/coverage.json and to the bundle DIR/cluster-coverage.duckdb, which is merged with the nodes'
bundles into DIR/merged.duckdb, so the nodes that gave nothing are in the incident too. Exit 1 when a
node did not answer."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.commands._args import positive_float, positive_int
from workbench.errors import UsageError
from workbench.timespec import parse_since

if TYPE_CHECKING:  # the cluster modules load DuckDB: imported when a sub-action runs, not to build the parser
    from workbench.capture.cluster.coverage import NodeResult

NAME = "cluster"
HELP = "capture every node of a Slurm job (srun, epilog) or a Kubernetes node set, with a coverage table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser), required=True)
    capture = actions.add_parser("capture", help="one gpuwb capture per node, through srun",
                                 description="One `gpuwb capture` per node of job J (or of a host list), "
                                             "through srun, with a coverage table and the merged bundle.")
    collect = actions.add_parser("collect", help="the coverage and merged bundle of bundles already in DIR/nodes",
                                 description="The coverage table and merged bundle of per-node bundles already "
                                             "in DIR/nodes (the Slurm epilog's, a Kubernetes Job's).")
    manifest = actions.add_parser("manifest", help="the Kubernetes Job that captures these nodes",
                                  description="Print the Kubernetes Job (one pod per node) that captures the nodes.")
    for action in (capture, collect):
        action.add_argument("--slurm-job", metavar="J", help="the Slurm job whose nodes to capture")
        action.add_argument("--nodes", metavar="LIST", help="a Slurm host list: node[01-16],gpu-7")
        action.add_argument("--out", metavar="DIR", help="shared folder for the per-node bundles")
        action.add_argument("--title", metavar="T", help="title of the merged incident")
        action.add_argument("--no-merge", action="store_true", help="write the per-node bundles and coverage only")
        action.add_argument("--json", action="store_true",
                            help="print the coverage as one JSON object (the table goes to stderr)")
    manifest.add_argument("--nodes", metavar="LIST", help="the Kubernetes node names, as a Slurm host list")
    for action in (capture, manifest):
        action.add_argument("--since", metavar="DURATION", default="24h",
                            help="how far back each node collects logs: 30m, 6h, 2d or an ISO time (default 24h)")
        action.add_argument("--safe", action="store_true", help="pass --safe to every node's capture (no NVML)")
    capture.add_argument("--only", metavar="COLLECTOR", action="append", help="passed on to every node's capture")
    capture.add_argument("--skip", metavar="COLLECTOR", action="append", help="passed on to every node's capture")
    capture.add_argument("--node-timeout", type=positive_float, default=180.0, metavar="SECONDS",
                         help="cut a node's capture off after this long (default 180)")
    capture.add_argument("--fanout", type=positive_int, default=32, metavar="N",
                         help="nodes captured at once (default 32)")
    capture.add_argument("--gpuwb", metavar="PATH",
                         help="the gpuwb program on the nodes (default: this Python, -m workbench.cli)")
    manifest.add_argument("--image", metavar="IMAGE", help="container image with gpuwb installed")
    manifest.add_argument("--name", metavar="NAME", help="Job name (default gpuwb-capture-DATE-TIME)")
    manifest.add_argument("--namespace", metavar="NS", default="gpuwb", help="namespace (default gpuwb)")
    manifest.add_argument("--claim", metavar="PVC", default="gpuwb-bundles",
                          help="ReadWriteMany claim the bundles go to (default gpuwb-bundles)")
    manifest.add_argument("--claim-size", metavar="SIZE", help="also print that claim, of this size (e.g. 20Gi)")
    manifest.add_argument("--storage-class", metavar="CLASS", help="storage class of the printed claim")
    manifest.add_argument("--nccl-log-dir", metavar="DIR", action="append", default=[],
                          help="host folder of NCCL logs, mounted read-only (repeatable)")
    manifest.add_argument("--deadline", type=positive_int, default=900, metavar="SECONDS",
                          help="the Job ends after this long, pods on down nodes included (default 900)")


def run(args: argparse.Namespace) -> int:
    if args.action == "manifest":
        _manifest(args)
        return 0
    if bool(args.slurm_job) == bool(args.nodes):
        raise UsageError(f"cluster {args.action}: give either --slurm-job J or --nodes LIST")
    if not args.out:
        raise UsageError(f"cluster {args.action}: --out DIR is required (a folder every node can write)")
    if args.action == "capture":
        results, about = _capture(args)
    else:
        results, about = _collect(args)
    return _finish(args, Path(args.out).resolve(), results, about)


def _capture(args: argparse.Namespace) -> tuple[list[NodeResult], dict[str, Any]]:
    from workbench.capture.cluster import slurm

    since = parse_since(args.since)
    if shutil.which("srun") is None:
        raise UsageError("srun not found: cluster capture launches through Slurm (use manifest for Kubernetes)")
    job = slurm.job_nodes(args.slurm_job) if args.slurm_job else None
    nodes = job.nodes if job else slurm.node_names(args.nodes)
    states = slurm.node_states(nodes)
    folder = _new_folder(Path(args.out))
    plans, skipped = slurm.plan_nodes(nodes, states, folder=folder / "nodes",
                                      gpuwb=slurm.gpuwb_command(args.gpuwb), since=since,
                                      timeout_s=args.node_timeout, safe=args.safe, job=job, only=args.only,
                                      skip=args.skip)
    where = f"job {job.job} ({job.state})" if job else "nodes"
    print(f"gpuwb cluster capture: {where}: {len(nodes)} node(s), {len(plans)} launched through srun "
          f"({'in the job' if job and job.running else 'one-node allocations'}), "
          f"{len(skipped)} down; {args.node_timeout:g} s each, {args.fanout} at once -> {folder}", file=sys.stderr)
    for r in skipped:
        _progress(r)
    launched, complete = slurm.run_plans(plans, timeout_s=args.node_timeout, fanout=args.fanout,
                                         progress=_progress)
    by_node = {r.node: r for r in [*launched, *skipped]}
    about = {"launcher": "srun", "job": job.job if job else None, "job_state": job.state if job else None,
             "nodes": nodes, "since": since.isoformat(timespec="seconds"), "node_timeout_s": args.node_timeout,
             "safe": args.safe, "complete": complete}
    return [by_node[n] for n in nodes], about


def _collect(args: argparse.Namespace) -> tuple[list[NodeResult], dict[str, Any]]:
    from workbench.capture.cluster import slurm
    from workbench.capture.cluster.coverage import COVERAGE_BUNDLE, judge

    folder = Path(args.out).resolve()
    if not (folder / "nodes").is_dir():
        raise UsageError(f"--out {folder}: no nodes/ folder with per-node bundles in it")
    for name in (COVERAGE_BUNDLE, "merged.duckdb"):
        if (folder / name).exists():
            raise UsageError(f"{folder / name} already exists: this folder was collected; remove it to collect again")
    job = slurm.job_nodes(args.slurm_job) if args.slurm_job else None
    nodes = job.nodes if job else slurm.node_names(args.nodes)
    states: dict[str, tuple[str, str]] = {}
    if shutil.which("sinfo"):
        try:
            states = slurm.node_states(nodes)
        except UsageError:  # no controller here (bundles copied from Kubernetes): rows without a Slurm state
            states = {}
    results = [judge(n, bundle=folder / "nodes" / f"{n}.duckdb", log=folder / "nodes" / f"{n}.log",
                     slurm_state=states.get(n, ("", ""))[0]) for n in nodes]
    about = {"launcher": "collect", "job": job.job if job else None, "job_state": job.state if job else None,
             "nodes": nodes}
    return results, about


def _finish(args: argparse.Namespace, folder: Path, results: list[NodeResult], about: dict[str, Any]) -> int:
    from workbench.capture.cluster.coverage import (
        COVERAGE_BUNDLE,
        coverage_document,
        coverage_table,
        record_coverage,
        summary,
        write_coverage,
    )

    title = args.title or (f"Slurm job {about['job']} on {len(results)} node(s)" if about.get("job")
                           else f"cluster capture of {len(results)} node(s)")
    written = write_coverage(folder, results, about)
    coverage_bundle = record_coverage(folder / COVERAGE_BUNDLE, results, about, title=f"coverage: {title}")
    text = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the one object alone
    print(file=text)
    print("Coverage per node", file=text)
    print(coverage_table(results), file=text)
    print(file=text)
    print(summary(results), file=text)
    print(f"coverage: {written}, {coverage_bundle}", file=text)
    merged_path = None
    code = 0 if all(r.status == "answered" for r in results) else 1
    if about.get("complete") is False:
        print("gpuwb: interrupted: the coverage is written, the merge is left out", file=sys.stderr)
        code = 130
    elif not args.no_merge:
        from workbench.ingest.merge import merge_bundles

        inputs = [r.bundle for r in results if r.bundle is not None] + [coverage_bundle]
        merged = merge_bundles(folder / "merged.duckdb", inputs, title=title)
        merged_path = str(merged.path)
        print(f"merged {len(inputs) - 1} node bundle(s) and the coverage into {merged.path} "
              f"(root digest {merged.root_digest[:16]}…)", file=text)
    if args.json:
        sys.stdout.write(json.dumps({**coverage_document(results, about), "coverage_file": str(written),
                                     "coverage_bundle": str(coverage_bundle), "merged": merged_path},
                                    default=str) + "\n")
    return code


def _new_folder(out: Path) -> Path:
    """The capture's folder: created if new, refused if it already holds a cluster capture."""
    folder = out.resolve()
    if not folder.parent.is_dir():
        raise UsageError(f"--out {out}: folder {folder.parent} does not exist")
    if (folder / "nodes").exists() or (folder / "coverage.json").exists():
        raise UsageError(f"--out {out} already holds a cluster capture; choose another folder")
    (folder / "nodes").mkdir(parents=True)
    return folder


def _progress(result: NodeResult) -> None:
    print(f"  {result.node:<20} {result.status:<10} {result.seconds:6.1f}s  {result.reason[:80]}", file=sys.stderr)


def _manifest(args: argparse.Namespace) -> None:
    from workbench.capture.cluster import slurm
    from workbench.capture.cluster.manifest import ManifestOptions, default_name, manifest_yaml

    if not args.nodes:
        raise UsageError("cluster manifest: --nodes LIST is required (the Kubernetes node names)")
    if not args.image:
        raise UsageError("cluster manifest: --image IMAGE is required (an image with gpuwb installed)")
    options = ManifestOptions(nodes=slurm.node_names(args.nodes), image=args.image, name=args.name or default_name(),
                              namespace=args.namespace, claim=args.claim, claim_size=args.claim_size,
                              storage_class=args.storage_class, since=parse_since(args.since), safe=args.safe,
                              nccl_dirs=args.nccl_log_dir, deadline_s=args.deadline)
    sys.stdout.write(manifest_yaml(options))
