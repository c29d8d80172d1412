"""Flight recorder: keep a ring of this node's evidence and freeze it into a bundle when something breaks.

  gpuwb record --out DIR [--kernel-log FILE] [--watch GLOB]... [--prom URL]   run the recorder
               [--textfile-dir DIR] [--metrics-port PORT]    ... and export gpuwb_log_events_total
  gpuwb record trigger --out DIR --reason TEXT    freeze now (a Slurm epilog, a human)
  gpuwb record status --out DIR [--json]          what the recorder follows, its ring, the last trigger
  gpuwb record --print-unit [options]             a systemd unit that runs the recorder with these options
  gpuwb record --print-daemonset --image IMG [options]   the same as a Kubernetes DaemonSet

The ring holds the last --window of raw kernel and watched-log lines, NVML samples and Prometheus
pages, in DIR/ring (at most --max-disk; it survives kill -9 and a reboot, and a restart continues it).
A new Xid, SXid, fallen-off-bus or fatal AER line, an NCCL watchdog timeout in a watched log,
`gpuwb record trigger` or SIGUSR1 writes a sealed bundle DIR/incident-HOST-TIME.duckdb with the window
before the trigger, adds the --after window, then merges in a normal one-shot capture. A burst of
triggers is one incident; another bundle comes only after --cooldown. With --textfile-dir (for
node_exporter's textfile collector) or --metrics-port, every line read is counted as
gpuwb_log_events_total{instance, kind, xid, state, reason, event_severity}, the counter the alert rules of
`gpuwb report --rules` read (docs/alerts.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from workbench.capture.recorder.config import RecorderConfig, parse_size
from workbench.capture.recorder.status import format_status, read_status, recorder_state
from workbench.capture.recorder.triggers import drop_trigger_file
from workbench.capture.recorder.unit import unit_text
from workbench.errors import UsageError
from workbench.timespec import parse_duration

NAME = "record"
HELP = "keep a ring of this node's evidence; freeze it into a bundle on an Xid (flight recorder)"
DEFAULT_UNIT_OUT = "/var/lib/gpuwb/record"
DEFAULT_TEXTFILE_DIR = {"unit": "/var/lib/prometheus/node-exporter",
                        "daemonset": "/var/lib/node_exporter/textfile_collector"}
"""Where the printed services put gpuwb.prom unless --textfile-dir says: Debian's node_exporter reads the
first by default; the second is the folder node-exporter DaemonSets commonly mount for textfiles."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    _out(parser)
    parser.add_argument("--kernel-log", metavar="FILE",
                        help="follow this file as the kernel log (default: the journal, else /dev/kmsg)")
    parser.add_argument("--watch", metavar="GLOB", action="append", default=[],
                        help="logs to keep (and count): NCCL / trainer logs, watched for watchdog timeouts, "
                             "slurmctld.log, kubelet logs (repeatable)")
    parser.add_argument("--prom", metavar="URL", help="a Prometheus metrics page to scrape into the ring")
    parser.add_argument("--window", default="30m", metavar="DURATION", help="how much the ring keeps (default 30m)")
    parser.add_argument("--after", default="2m", metavar="DURATION",
                        help="how long to keep recording into the bundle after a trigger (default 2m)")
    parser.add_argument("--max-disk", default="200MB", metavar="SIZE", help="cap of the on-disk ring (default 200MB)")
    parser.add_argument("--nvml-interval", default="10s", metavar="DURATION",
                        help="seconds between NVML samples (default 10s)")
    parser.add_argument("--cooldown", default="10m", metavar="DURATION",
                        help="after a bundle, triggers within this time join it (default 10m)")
    parser.add_argument("--no-nvml", action="store_true", help="do not sample NVML")
    parser.add_argument("--no-capture", action="store_true",
                        help="freeze only the ring, without the one-shot capture after it")
    parser.add_argument("--host", metavar="NAME",
                        help="this node's name in bundles and metrics (default: the host name; in a pod, the node's)")
    metrics = parser.add_argument_group("the log-event counter (docs/alerts.md)")
    metrics.add_argument("--textfile-dir", metavar="DIR",
                         help="write DIR/gpuwb.prom for node_exporter's --collector.textfile.directory")
    metrics.add_argument("--metrics-port", type=_port, metavar="PORT",
                         help="also serve it at http://127.0.0.1:PORT/metrics (loopback only)")
    metrics.add_argument("--metrics-hold", default="60s", metavar="DURATION",
                         help="a label set seen for the first time shows 0 this long before its count, so that "
                              "increase() sees it rise: at least the scrape interval (default 60s)")
    printing = parser.add_argument_group("printing the service instead of running it")
    printing.add_argument("--print-unit", action="store_true", help="print a systemd unit for these options and exit")
    printing.add_argument("--print-daemonset", action="store_true",
                          help="print a Kubernetes DaemonSet running the recorder with these options and exit")
    printing.add_argument("--image", metavar="IMAGE", help="with --print-daemonset: an image with gpuwb installed")
    printing.add_argument("--namespace", metavar="NS", default="gpuwb",
                          help="with --print-daemonset: its namespace (default gpuwb)")
    parser.add_argument("--reason", help=argparse.SUPPRESS)  # trigger's, also accepted before it
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    trigger = actions.add_parser("trigger", help="freeze now (a Slurm epilog, a human)",
                                 description="Freeze now: drop a trigger the running recorder picks up on its next "
                                             "poll.")
    _out(trigger, child=True)
    trigger.add_argument("--reason", metavar="TEXT", default=argparse.SUPPRESS, help="why (kept in the bundle)")
    status = actions.add_parser("status", help="print the running recorder's health",
                                description="What the recorder follows, its ring, NVML, the log-event counter, the "
                                            "last trigger and the bundles written.")
    _out(status, child=True)
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")


def _out(parser: argparse.ArgumentParser, child: bool = False) -> None:
    """--out on the command and on its actions: ``record --out DIR status`` and ``record status --out DIR``
    both work (an action's own default must not hide the one given before it)."""
    parser.add_argument("--out", metavar="DIR", default=argparse.SUPPRESS if child else None,
                        help="folder for the ring, the status file and the bundles")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535; 0 picks a free one)")
    return value


def _seconds(text: str, option: str) -> float:
    try:
        value = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if value <= 0:
        raise UsageError(f"{option}: {text!r} must be above 0")
    return value


def config_of(args: argparse.Namespace, out: str) -> RecorderConfig:
    try:
        max_disk = parse_size(args.max_disk)
    except ValueError as exc:
        raise UsageError(f"--max-disk: {exc}") from None
    if max_disk < 1 << 20:
        raise UsageError(f"--max-disk {args.max_disk}: the ring needs at least 1MB")
    return RecorderConfig(out=os.path.abspath(out), kernel_log=os.path.abspath(args.kernel_log) if args.kernel_log
                          else None, watch=list(args.watch), prom=args.prom,
                          window_s=_seconds(args.window, "--window"), after_s=_seconds(args.after, "--after"),
                          max_disk=max_disk, nvml_interval_s=_seconds(args.nvml_interval, "--nvml-interval"),
                          cooldown_s=_seconds(args.cooldown, "--cooldown"), capture=not args.no_capture,
                          nvml=not args.no_nvml, host=args.host,
                          textfile_dir=os.path.abspath(args.textfile_dir) if args.textfile_dir else None,
                          metrics_port=args.metrics_port, metrics_hold_s=_seconds(args.metrics_hold, "--metrics-hold"))


def run(args: argparse.Namespace) -> int:
    if args.print_unit or args.print_daemonset:
        if args.action:
            raise UsageError(f"--print-unit and --print-daemonset print the recorder's service, not {args.action}")
        if args.print_unit and args.print_daemonset:
            raise UsageError("give --print-unit or --print-daemonset, not both")
        if not args.textfile_dir and args.metrics_port is None:  # a printed service exports the counter
            args.textfile_dir = DEFAULT_TEXTFILE_DIR["unit" if args.print_unit else "daemonset"]
        config = config_of(args, args.out or DEFAULT_UNIT_OUT)
        if args.print_unit:
            print(unit_text(config), end="")
            return 0
        if not args.image:
            raise UsageError("--print-daemonset needs --image IMAGE (an image with gpuwb installed)")
        from workbench.capture.recorder.manifest import daemonset_yaml

        print(daemonset_yaml(config, image=args.image, namespace=args.namespace), end="")
        return 0
    if args.image:
        raise UsageError("--image goes with --print-daemonset")
    if not args.out:
        raise UsageError("--out DIR is required")
    if args.reason is not None and args.action != "trigger":
        raise UsageError("--reason goes with: gpuwb record trigger --out DIR --reason TEXT")
    out = Path(args.out)
    if args.action == "status":
        status = read_status(out / "status.json")
        if status is None:
            raise UsageError(f"no recorder status in {out} (is gpuwb record --out {out} running?)")
        if args.json:
            sys.stdout.write(json.dumps({**status, "state": recorder_state(status)}) + "\n")
        else:
            print(format_status(status))
        return 0
    if args.action == "trigger":
        if not out.is_dir():
            raise UsageError(f"{out} is not a recorder folder (no such folder)")
        path = drop_trigger_file(out / "triggers", args.reason or "gpuwb record trigger")
        status = read_status(out / "status.json")
        running = "" if status else " (no recorder has written a status there yet)"
        print(f"trigger dropped: {path.name}; the recorder freezes on its next poll{running}")
        return 0
    config = config_of(args, args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    if not os.access(out, os.W_OK):
        raise UsageError(f"--out {out} is not writable")
    sys.stdout.flush()
    sys.stderr.flush()
    # the recorder runs for months: replace this process (same pid) by one that loaded only the recorder
    os.execv(sys.executable, [sys.executable, "-m", "workbench.capture.recorder.daemon", config.to_json()])
    return 0
