"""Flight recorder: keep a ring of this node's evidence and freeze it into a bundle when something breaks.

  gpuwb record --out DIR [--kernel-log FILE] [--watch GLOB]... [--prom URL]   run the recorder
  gpuwb record trigger --out DIR --reason TEXT    freeze now (a Slurm epilog, a human)
  gpuwb record status --out DIR                   what the recorder follows, its ring, the last trigger
  gpuwb record --print-unit [options]             a systemd unit that runs the recorder with these options

The ring holds the last --window of raw kernel and watched-log lines, NVML samples and Prometheus
pages, in DIR/ring (at most --max-disk; it survives kill -9 and a reboot, and a restart continues it).
A new Xid, SXid, fallen-off-bus or fatal AER line, an NCCL watchdog timeout in a watched log,
`gpuwb record trigger` or SIGUSR1 writes a sealed bundle DIR/incident-HOST-TIME.duckdb with the window
before the trigger, adds the --after window, then merges in a normal one-shot capture. A burst of
triggers is one incident; another bundle comes only after --cooldown."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from workbench.errors import UsageError
from workbench.recorder.config import RecorderConfig, parse_size
from workbench.recorder.status import format_status, read_status
from workbench.recorder.triggers import drop_trigger_file
from workbench.recorder.unit import unit_text
from workbench.timespec import parse_duration

NAME = "record"
HELP = "keep a ring of this node's evidence; freeze it into a bundle on an Xid (flight recorder)"
DEFAULT_UNIT_OUT = "/var/lib/gpuwb/record"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("action", nargs="?", choices=("trigger", "status"), metavar="ACTION",
                        help="trigger: freeze now; status: print the running recorder's health (default: record)")
    parser.add_argument("--out", metavar="DIR", help="folder for the ring, the status file and the bundles")
    parser.add_argument("--kernel-log", metavar="FILE",
                        help="follow this file as the kernel log (default: the journal, else /dev/kmsg)")
    parser.add_argument("--watch", metavar="GLOB", action="append", default=[],
                        help="NCCL / trainer logs to keep and watch for watchdog timeouts (repeatable)")
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
    parser.add_argument("--reason", metavar="TEXT", help="with trigger: why (kept in the bundle)")
    parser.add_argument("--print-unit", action="store_true", help="print a systemd unit for these options and exit")


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
                          nvml=not args.no_nvml)


def run(args: argparse.Namespace) -> int:
    if args.print_unit:
        print(unit_text(config_of(args, args.out or DEFAULT_UNIT_OUT)), end="")
        return 0
    if not args.out:
        raise UsageError("--out DIR is required")
    if args.reason is not None and args.action != "trigger":
        raise UsageError("--reason goes with: gpuwb record trigger --out DIR --reason TEXT")
    out = Path(args.out)
    if args.action == "status":
        status = read_status(out / "status.json")
        if status is None:
            raise UsageError(f"no recorder status in {out} (is gpuwb record --out {out} running?)")
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
    os.execv(sys.executable, [sys.executable, "-m", "workbench.recorder.daemon", config.to_json()])
    return 0
