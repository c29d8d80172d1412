"""Slurm host lists, ``node[01-04,07],gpu-[1-2]-a``, as host names: the one reading of that syntax.

A list is names separated by top-level commas; each bracket group is a comma list of numbers and
ranges whose zero padding is kept (``[08-10]`` is 08 09 10, ``[8-10]`` is 8 9 10); several groups in
one name multiply out (``rack[1-2]-n[1-2]``), and text after a group is a suffix (``gpu-[1-2]-a``).
The Slurm collector reads job and node lines with it; the analysis reads the ``nodes`` of a symptom.
"""

from __future__ import annotations

from collectors.framework.lazy_re import lazy_regex

MAX_HOSTS = 100_000
"""Names one list may expand to: ``n[0-99999999999]`` must not exhaust memory."""

_EMPTY = ("", "none", "(null)", "none assigned", "n/a")
"""How Slurm writes "no nodes" (a pending job's NodeList)."""

_GROUP = lazy_regex(r"^(.*?)\[([^\]]*)\](.*)$")
_RANGE = lazy_regex(r"\s*(\d+)\s*-\s*(\d+)\s*")


def expand_hostlist(text: str | None) -> list[str]:
    """Each host name of a Slurm host list, in order, at most MAX_HOSTS; [] for Slurm's "none"."""
    if not text:
        return []
    text = text.strip()
    if text.lower() in _EMPTY or text.startswith("("):
        return []
    out: list[str] = []
    for part in split_hostlist(text):
        out.extend(_expand_one(part))
        if len(out) >= MAX_HOSTS:
            return out[:MAX_HOSTS]
    return out


def split_hostlist(text: str) -> list[str]:
    """``a,b`` -> [a, b] at top level only: ``gpu[01-04,07]`` stays one item."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (p.strip() for p in parts) if p]


def _expand_one(part: str) -> list[str]:
    m = _GROUP.match(part)
    if not m:
        return [part]
    prefix, body, rest = m.groups()
    tails = _expand_one(rest) if rest else [""]
    out: list[str] = []
    for item in body.split(","):
        rng = _RANGE.fullmatch(item)
        if rng:
            lo, hi = int(rng.group(1)), int(rng.group(2))
            width = len(rng.group(1))
            hi = min(hi, lo + MAX_HOSTS)
            names = [f"{prefix}{i:0{width}d}" for i in range(lo, hi + 1)]
        elif item.strip():
            names = [f"{prefix}{item.strip()}"]
        else:
            names = []
        out.extend(f"{name}{tail}" for name in names for tail in tails)
        if len(out) >= MAX_HOSTS:
            break
    return out
