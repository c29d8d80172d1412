"""Which kernel-log style a file's head is written in (dmesg, ctime, ISO, journal, syslog, kmsg, pstore),
and how sure: confident only when most lines are kernel lines."""

from __future__ import annotations

from collections import Counter

from collectors.framework.kernel_lines import Prefix, split_prefix

_BARE_TAGS = ("NVRM:", "nvidia-nvswitch", "pcieport ", "mce: ", "EDAC ", "nfs: server", "INFO: task", "Out of memory",
              "oom-kill:", "LustreError:", "Lustre:", "LNet:", "mlx5_core ", "IPv6: ADDRCONF", "[Hardware Error]",
              "Call Trace:", "NETDEV WATCHDOG")
_STYLE_KIND = {"mono": "dmesg", "ctime": "dmesg_ctime", "iso": "dmesg_iso", "journal": "journal", "syslog": "syslog",
               "kmsg": "kmsg"}


def sniff(name: str, head: str) -> dict[str, int]:
    """Confident only for text whose lines are kernel-log lines; a system log that is mostly other
    programs, or a few kernel-looking lines inside something else, scores low."""
    lines = [line for line in head.splitlines()[:400] if line.strip()][:200]
    if not lines:
        return {}
    if lines[0].startswith(("Oops#", "Panic#", "Emergency#")) or "pstore" in name.lower():
        return {"pstore": 90}
    styles: Counter[str] = Counter()
    counted = 0
    for line in lines:
        if line[:1] in (" ", "\t"):
            continue
        counted += 1
        if not _may_be_kernel(line):
            continue
        pre, msg = split_prefix(line)
        style = _kernel_style(pre, msg)
        if style:
            styles[style] += 1
    kernelish = sum(styles.values())
    if not kernelish or not counted:
        return {}
    style, _ = styles.most_common(1)[0]
    frac = kernelish / counted
    strong = style != "kmsg"
    if frac >= 0.6:
        score = 90 if strong else 75
    elif frac >= 0.2:
        score = 60 if strong else 40
    else:
        score = 30 if style in ("journal", "syslog") else 15
    lowered = name.lower()
    if any(hint in lowered for hint in ("dmesg", "kern", "journal", "messages", "syslog")):
        score += 5
    return {_STYLE_KIND[style]: score}


_FACILITY_INITIALS = frozenset("kumdaslncf")
"""First letters of the facilities ``dmesg -x`` prints (kern, user, mail, daemon, auth, syslog, lpr, news, ...)."""


def _may_be_kernel(line: str) -> bool:
    """False for a line split_prefix would leave without a prefix and _kernel_style would not count: it
    starts with no bracket, digit, capital, facility or bare tag (an NCCL ``host:pid:tid`` line)."""
    first = line[:1]
    return (first in ("[", "<") or first.isdigit() or first.isupper() or first in _FACILITY_INITIALS
            or line.startswith(_BARE_TAGS))


def _kernel_style(pre: Prefix, msg: str) -> str | None:
    if pre.style == "mono":
        return "mono" if len((pre.raw or "").split(".")[-1]) == 6 else None  # Xorg prints 3 decimals
    if pre.style in ("ctime", "iso"):
        return pre.style
    if pre.style in ("journal", "syslog"):
        return pre.style if pre.ident == "kernel" else None
    if pre.ident == "kernel" or msg.startswith(_BARE_TAGS):
        return "kmsg"
    return None
