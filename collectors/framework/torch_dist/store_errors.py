"""The c10d key-value store and its sockets (``store->get('...') got error: ...``, ``[c10d] ... timed out``), and
the ``DistNetworkError`` / ``DistStoreError`` exceptions: rendezvous and store failures, the network's side."""

from __future__ import annotations

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Finding, exception_named
from collectors.framework.torch_dist.rank_prefix import pg_info

_STORE_ERROR = lazy_regex(r"(?:store->get\('[^']*'\)|c10d key-value store).*?got error: (?P<text>.+)$")
_C10D_SOCKET = lazy_regex(r"\[c10d\] (?P<text>.*?(?:timed out|has failed|[Rr]efused|reset by peer|[Bb]roken pipe|"
                          r"unreachable|[Nn]o route).*)$")
_DIST_ERROR = lazy_regex(r"(?P<exc>torch\.distributed\.Dist(?:Backend|Network|Store)Error|Dist(?:Network|Store)Error)"
                         r":\s*(?P<text>.*)")


def store_error(msg: str) -> Finding | None:
    """A c10d store or socket failure."""
    if not (("got error:" in msg and (m := _STORE_ERROR.search(msg))) or ("[c10d]" in msg
                                                                        and (m := _C10D_SOCKET.search(msg)))):
        return None
    attrs = {"error": m.group("text").strip()[:500], "operation": "c10d store / rendezvous"}
    if e := exception_named(msg[:m.start()]):
        attrs["exception"] = e
    pg, rank = pg_info(msg)
    attrs.update(pg)
    return Finding("nccl_net_error", "error", attrs, layer="network_storage", rank=rank)


def dist_error(msg: str) -> Finding | None:
    """A ``torch.distributed.Dist*Error`` raised with its text."""
    if not ("Dist" in msg and (m := _DIST_ERROR.search(msg))):
        return None
    attrs = {"exception": m.group("exc").rsplit(".", 1)[-1], "error": m.group("text").strip()[:500]}
    pg, rank = pg_info(msg)
    attrs.update(pg)
    return Finding("nccl_net_error", "error", attrs, layer="network_storage", rank=rank)
