"""The block prefilter: which lines of a 4 MiB block can be events, found without a Python loop per line.

One RE2 pass for the keywords' short windows, or numpy compares for a few rare anchor bytes then an 8-byte
window check around each anchor. The RE2 pass also narrows the keywords a busy Kubernetes node prints on
most lines (NARROWED), so a chatty log costs about what a quiet one does."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from collectors.framework.kernel_lines import CONTAINER_INTERFACES, ERROR_WORDS, NV_BARE
from collectors.kernel.blocks import Block

KEYWORDS = (b"NVRM", b"SXid", b"AER:", b"PCIe Bus Error", b"DPC: containment", b"PCIe bandwidth",
            b"[Hardware Error]", b"EDAC", b"temperature above threshold", b"Killed process", b"oom-kill",
            b"invoked oom", b"INFO: ", b"soft lockup", b"hard LOCKUP", b"Kernel panic", b"Link ",
            b"link is not ready", b"link becomes ready", b"link status definitely", b"Releasing backup",
            b"Releasing active", b"without any active interface", b"infiniband", b"rdma_rxe", b"mlx5_",
            b"NETDEV WATCHDOG", b"Port module event", b": server ", b"Lustre", b"LNet", b"segfault",
            b"protection fault", b"nvidia", b"I/O error", b"Linux version", b"fabricmanager", b"Driver/library",
            b"blocked for more than", b"Remounting filesystem", b"fs error (device",
            b"Disk failure on", b"beyond end of", b"no available path", b"reset controller",
            b"timeout, aborting", b"Disabling device after", b"hutting down filesystem", b"Corruption detected",
            b"Corruption of in-memory", b"BTRFS error", b"mmfs", b"file-max limit", b"Lock reclaim failed",
            b"insufficient power", b"health compromised", b"health_try_recover", b"Port: ",
            b"Oops: ", b"kernel BUG at", b"NULL pointer dereference", b"unable to handle",
            b"Device isn't ready", b"Reset indication", b"Admin queue is closed",
            b"Wait for completion (polling)", b"Kill process", b"Abort status: ", b"controller is down",
            b"after probe failure", b"Device not ready", b"Detected IO errors", b"blocks, I/O Error",
            b"has been shut down", b"Operation continuing on", b"detected when updating journal",
            b"Delayed block allocation", b"Data will be lost", b"critical medium error", b"critical target error",
            b"timeout, disable controller", b"state error detected",
            b"kthread starved", b"OOM is now expected", b"no killable processes", b"oom_reaper: ",
            b"Card not present", b"ms after FLR", b"ms after bus reset", b"ms after DPC", b"; giving up",
            *(w.encode() for w in NV_BARE))
"""Literals a line must hold to be looked at by the per-line parser; every handler of
collectors/framework/kernel_lines/, and every sample of the signature catalog's kernel families (which run
on these candidate lines only: tests/collectors/test_kernel_signature_reach.py), is reachable through at
least one of them."""
NARROWED = (b"mlx5_", b"nvidia", b"link becomes ready", b"link is not ready")
"""Keywords that most lines of a busy Kubernetes GPU node hold without being evidence (the mlx5 firmware
tracer, nvidia-uvm loading per container, veth pairs becoming ready per pod): the RE2 pass keeps such a
line only with what a handler or signature needs from it (_narrowed); the numpy pass keeps them all,
and the lines it keeps besides make no rows."""

RARITY = b"QZJXVKWYHBRwLDOvxfUGFqzjkyCIPMTNASEbgpmhucdltrisnoae"
"""Bytes from rarest to commonest in kernel logs: each keyword is anchored at its rarest byte, and
this order also keeps the number of distinct anchor bytes small (each costs one pass)."""
RE2_BLOCK_HITS = 2048
"""Above this many window hits in a block the RE2 pass (a Python tuple per hit) gives way to the numpy
one; a block with that many candidates spends far longer in the per-line parser either way."""


class Prefilter:
    """Keyword candidates of a block without a Python loop per line: one numpy compare per anchor
    byte, then the 8 bytes around each anchor against the keywords anchored there. The same windows as
    one RE2 alternation find those lines about twice as fast when hits are few (a window holds no
    newline, so every line holding one gets a match), less the NARROWED keywords' lines that cannot
    make a row (``anchors``: the signature catalog's, which such a line may still match)."""

    def __init__(self, anchors: Iterable[str] = ()) -> None:
        import numpy as np  # deferred: numpy costs ~0.1 s to import and capture never needs it

        self.np = np
        by_mask: dict[int, set[int]] = {}
        anchor_bytes: set[int] = set()
        plain: set[bytes] = set()
        narrowed: set[bytes] = set()
        for kw in KEYWORDS:
            i = min(range(len(kw)), key=lambda j: (RARITY.find(bytes([kw[j]])) % 1000,
                                                   -(min(j, 3) + min(len(kw) - j, 5))))
            lo = max(0, i - 3)
            window = kw[lo:i + 5]
            shift = 3 - (i - lo)
            by_mask.setdefault(((1 << (8 * len(window))) - 1) << (8 * shift), set()).add(
                int.from_bytes(window, "little") << (8 * shift))
            anchor_bytes.add(kw[i])
            (narrowed if kw in NARROWED else plain).add(window)
        self.anchors = sorted(anchor_bytes)
        self.masks = [(np.uint64(mask), np.array(sorted(vals), dtype=np.uint64)) for mask, vals in by_mask.items()]
        self.windows = windows_regex(plain, sorted(narrowed - plain), anchors)

    def scan(self, block: Block | bytes) -> list[int]:
        """Sorted positions (in the block's own offsets) inside the candidate lines of one block."""
        if isinstance(block, bytes):
            block = Block(block, 0, len(block), True)
        if self.windows is not None:
            from collectors.framework.signatures import spans

            found = spans(self.windows, block.buf, RE2_BLOCK_HITS + 1, block.lo, block.hi)
            if len(found) <= RE2_BLOCK_HITS:
                return [start for start, _ in found]
        np = self.np
        data = block.buf[block.lo:block.hi]
        padded = b"\n\n\n" + data + b"\n" * 8
        arr = np.frombuffer(padded, dtype=np.uint8)[3:3 + len(data)]
        words = np.ndarray(shape=(len(data),), dtype="<u8", buffer=padded, offset=0, strides=(1,))
        hit = np.equal(arr, self.anchors[0])
        scratch = np.empty_like(hit)
        for anchor in self.anchors[1:]:
            np.bitwise_or(hit, np.equal(arr, anchor, out=scratch), out=hit)
        pos = np.flatnonzero(hit)
        if not pos.size:
            return []
        vals = words[pos]
        found = np.zeros(pos.size, dtype=bool)
        for mask, allowed in self.masks:
            found |= np.isin(vals & mask, allowed)
        return (pos[found] + block.lo).tolist()


def windows_regex(plain: set[bytes], narrowed: list[bytes], anchors: Iterable[str]) -> Any:
    """One RE2 alternation of the prefilter's windows; None where RE2 is not installed (numpy does it all).
    The windows of the NARROWED keywords count only with what a line needs to become a row (_narrowed)."""
    try:
        import re2
    except ImportError:
        return None
    options = re2.Options()
    options.max_mem = 64 << 20
    options.encoding = re2.Options.Encoding.LATIN1  # a byte each: ``[^\n]*`` goes on past invalid UTF-8
    alternatives = [re.escape(w) for w in sorted(plain, key=lambda w: (-len(w), w))]
    return re2.compile(b"|".join(alternatives + _narrowed(narrowed, anchors)), options)


def _narrowed(windows: list[bytes], anchors: Iterable[str]) -> list[bytes]:
    """RE2 alternatives that keep a line holding a NARROWED keyword's window only where a row can come
    of it: an error word on its line (rdma_error, nvidia_module), ``traps:`` (a trap in a GPU library), a
    signature anchor (the catalog runs on candidate lines), for an interface becoming ready an interface
    that is not container plumbing, or an indented line before or after it (a record of several lines
    is judged whole by the parser). Each alternative starts on the window's own line."""
    if not windows:
        return []
    window = b"(?:" + b"|".join(re.escape(w) for w in windows) + b")"
    line = rb"[^\n]*"
    errors = b"(?i:" + ERROR_WORDS.encode() + b")"
    extra = b"(?:" + b"|".join(re.escape(a.encode()) for a in sorted({"traps:", *anchors})) + b")"
    return [window + line + b"(?:" + errors + b"|" + extra + rb"|\n[ \t])",
            extra + line + window,
            errors + line + window,
            rb"(?m:^)[ \t]" + line + window,
            rb"ADDRCONF\(NETDEV_\w+\): " + _not_prefixed(CONTAINER_INTERFACES)
            + rb": link (?:is not ready|becomes ready)"]


def _not_prefixed(prefixes: tuple[str, ...]) -> bytes:
    """An RE2 pattern for an interface name (``[\\w.@-]+``) that starts with none of ``prefixes``."""
    name = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-"))

    def node(done: str, root: bool) -> bytes:
        following = sorted({p[len(done)] for p in prefixes if p.startswith(done) and len(p) > len(done)})
        other = "".join(re.escape(c) for c in name if c not in following)
        parts = [b"[" + other.encode() + rb"][\w.@-]*"]
        parts += [re.escape(c.encode()) + node(done + c, False) for c in following if done + c not in prefixes]
        if not root:
            parts.append(b"")
        return b"(?:" + b"|".join(parts) + b")"

    return node("", True)
