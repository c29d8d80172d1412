"""The systemd unit ``gpuwb record --print-unit`` prints: the recorder with the options it was given,
restarted when it dies, kept small and unobtrusive by the service manager as well."""

from __future__ import annotations

import shlex
import shutil
import sys

from workbench.capture.recorder.config import RecorderConfig


def exec_start(config: RecorderConfig) -> list[str]:
    """The command line that starts this recorder again, with every option spelled out."""
    gpuwb = shutil.which("gpuwb")
    return ([gpuwb] if gpuwb else [sys.executable, "-m", "workbench.cli"]) + record_args(config)


def record_args(config: RecorderConfig, host: str | None = None) -> list[str]:
    """``record`` and its options, as the service runs it (``host`` overrides the configured one)."""
    argv = ["record", "--out", config.out, "--window", f"{config.window_s:g}s", "--after", f"{config.after_s:g}s",
            "--max-disk", str(config.max_disk), "--nvml-interval", f"{config.nvml_interval_s:g}s",
            "--cooldown", f"{config.cooldown_s:g}s"]
    if host or config.host:
        argv += ["--host", host or config.host or ""]
    if config.kernel_log:
        argv += ["--kernel-log", config.kernel_log]
    for pattern in config.watch:
        argv += ["--watch", pattern]
    if config.prom:
        argv += ["--prom", config.prom]
    if not config.capture:
        argv.append("--no-capture")
    if not config.nvml:
        argv.append("--no-nvml")
    if config.textfile_dir:
        argv += ["--textfile-dir", config.textfile_dir]
    if config.metrics_port is not None:
        argv += ["--metrics-port", str(config.metrics_port)]
    if config.exporting:
        argv += ["--metrics-hold", f"{config.metrics_hold_s:g}s"]
    return argv


def unit_text(config: RecorderConfig) -> str:
    command = " ".join(shlex.quote(a).replace("%", "%%") for a in exec_start(config))
    return f"""[Unit]
Description=gpuwb flight recorder: keeps the last {config.window_s / 60:g} min of GPU evidence, freezes it on an Xid
After=systemd-journald.service nvidia-persistenced.service

[Service]
Type=simple
ExecStart={command}
Restart=always
RestartSec=5
Nice=10
IOSchedulingClass=idle
MemoryMax=256M
CPUQuota=10%
StateDirectory=gpuwb

[Install]
WantedBy=multi-user.target
"""
