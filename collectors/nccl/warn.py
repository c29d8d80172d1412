"""What an NCCL WARN/ERROR message means: a CUDA failure, a network error (IB work completion, async event,
verbs or socket call) with its details, or one of NCCL's own signatures (setup, /dev/shm, allocation,
NVLS); also what an NCCL message quoted by another program means (``meaning_of``)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from collectors.framework import torch_dist as torch_dist
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist import Finding

IB_WC_STATUS = {
    0: "success", 1: "local length error", 2: "local QP operation error", 3: "local EE context operation error",
    4: "local protection error", 5: "work request flushed error", 6: "memory management operation error",
    7: "bad response error", 8: "local access error", 9: "remote invalid request error", 10: "remote access error",
    11: "remote operation error", 12: "transport retry counter exceeded", 13: "RNR retry counter exceeded",
    14: "local RDD violation error", 15: "remote invalid RD request", 16: "operation aborted",
    17: "invalid EE context number", 18: "invalid EE context state", 19: "fatal error", 20: "response timeout error",
    21: "general error",
}
"""ibv_wc_status values as ibv_wc_status_str() names them: NCCL prints only the number."""


_IB_WC = lazy_regex(r"Got completion from peer (?P<peer>\S+?) with (?:status=|error )(?:(?P<sname>IBV_WC_\w+)\()?"
                    r"(?P<status>\d+)")
_WC_FIELDS = {
    "opcode": re.compile(r"opcode[= ](?:IBV_WC_\w+\()?(?P<v>\d+)"),
    "len": re.compile(r"\blen[= ](?P<v>\d+)"),
    "vendor_err": re.compile(r"vendor[ _]err[= ]?\s*(?P<v>\d+)"),
}
_WC_DIR = lazy_regex(r"\((?P<v>Send|Recv|Flush|Read|Write|Unused|Unknown|Put|Get)\)")
_GIDS = lazy_regex(r"localGid\s*(?P<local>\S+)|remoteGids?\s*(?P<remote>\S+)|\bhca (?P<hca>\S+)")
_ASYNC = lazy_regex(r"Got async event\s*:\s*(?P<v>[^,;]+?)\s*(?:$|[,;])")
_IBV_CALL = lazy_regex(r"Call to (?P<call>ibv_\w+) failed(?:\s*(?:with error|:)\s*(?P<err>.+))?")
_SOCKET_CALL = lazy_regex(r"Call to (?P<op>recv|send|connect|accept|poll|read|write|socket)\b(?: (?:from|to) "
                          r"(?P<peer>\S+))? ?failed\s*:?\s*(?P<err>.*)$")
_CONNECT = lazy_regex(r"Connect to (?P<peer>\S+) failed\s*:\s*(?P<err>.*)$")
_CLOSED = lazy_regex(r"Connection closed by remote peer (?P<peer>\S+)")
_SOCK_ERR = lazy_regex(r"Connection reset by peer|Broken pipe|Connection refused|Connection timed out|"
                       r"No route to host|Network is unreachable|Connection closed by remote peer")
_PROXY = lazy_regex(r"\[Proxy Service (?P<svc>\d+)\] Failed to execute operation (?P<op>\w+) from rank "
                    r"(?P<rank>\d+), retcode (?P<code>\d+)")
_CUDA_FAILURE = lazy_regex(r"Cuda failure (?:(?P<code>\d+) )?'(?P<text>[^']*)'")
_NET_WORDS = lazy_regex(r"NET/|\bIB\b|ibv_|[Ss]ocket|[Bb]ootstrap|[Cc]onnect|[Pp]roxy|remote|network|peer", re.I)


def net_details(text: str) -> dict[str, Any]:
    """What an NCCL network message says: IB work completion, async event, verbs call, socket error."""
    attrs: dict[str, Any] = {}
    if m := _IB_WC.search(text):
        status = int(m.group("status"))
        attrs.update(status=status, status_name=IB_WC_STATUS.get(status, m.group("sname") or "unknown"),
                     peer=m.group("peer"))
        for name, pattern in _WC_FIELDS.items():
            if f := pattern.search(text, m.end()):
                attrs[name] = int(f.group("v"))
        if d := _WC_DIR.search(text, m.end()):
            attrs["direction"] = d.group("v")
        for g in _GIDS.finditer(text, m.end()):
            for key, name in (("local", "local_gid"), ("remote", "remote_gid"), ("hca", "hca")):
                if g.group(key):
                    attrs[name] = g.group(key)
    if m := _ASYNC.search(text):
        attrs["async_event"] = m.group("v").strip()
    if m := _IBV_CALL.search(text):
        attrs["ibv_call"] = m.group("call")
        if m.group("err"):
            attrs["error"] = m.group("err").strip()[:200]
    if m := _SOCKET_CALL.search(text):
        attrs.setdefault("operation", m.group("op"))
        if m.group("peer"):
            attrs.setdefault("peer", m.group("peer"))
        if m.group("err"):
            attrs.setdefault("error", m.group("err").strip()[:200])
    elif m := _CONNECT.search(text):
        attrs.setdefault("peer", m.group("peer"))
        attrs.setdefault("error", m.group("err").strip()[:200])
    if m := _CLOSED.search(text):
        attrs.setdefault("peer", m.group("peer"))
        attrs.setdefault("error", "Connection closed by remote peer")
    if "error" not in attrs and (m := _SOCK_ERR.search(text)):
        attrs["error"] = m.group(0)
    if m := _PROXY.search(text):
        attrs.update(proxy_rank=int(m.group("rank")), operation=m.group("op"), nccl_result=int(m.group("code")))
        attrs["nccl_error"] = torch_dist.NCCL_RESULTS.get(attrs["nccl_result"])
    if isinstance(attrs.get("peer"), str):
        attrs["peer_ip"] = attrs["peer"].split("<", 1)[0]
    return attrs


_MEANINGS = frozenset({"nccl_setup_error", "nccl_shm_error", "nccl_alloc_failed", "nccl_nvls_error"})
"""Kinds of NCCL's own signatures that say what a message means even where the words alone would read
as a network or CUDA error (no interface found, /dev/shm full, Failed to CUDA calloc, NVLS bind)."""


@cache
def _own_catalog() -> tuple[Any, Any]:
    """NCCL's own signatures (collectors/catalog/signatures/nccl.yaml but the bare WARN and the interface
    list), built once, as two matchers: the messages with anchors of their own (setup, /dev/shm, NVLS, IB
    completions), and the families any WARN may belong to (topology, invalid usage, internal: anchored on
    ``NCCL WARN`` itself), tried only on a WARN the words left plain. Taken from the process's catalog, not
    loaded again: a second load_signatures (every YAML file parsed again) cost a WARN ~0.07 s CPU."""
    from collectors.framework.signatures import Matcher, catalog

    own = [s for s in catalog().signatures if s.family == "nccl" and s.kind not in ("nccl_warn", "nccl_net_interfaces")]
    return (Matcher(tuple(s for s in own if "NCCL WARN" not in s.anchors)),
            Matcher(tuple(s for s in own if "NCCL WARN" in s.anchors)))


def _meaning(msg: str, finding: Finding) -> Finding:
    """The finding of a WARN message as NCCL's catalog reads it: a setup mistake, /dev/shm, an
    allocation or NVLS failure becomes its own kind and cause; a message the words read as a network or
    CUDA error keeps that kind and takes the signature's cause; a plain WARN takes the family's kind."""
    specific, families = _own_catalog()
    found = specific.match(msg)
    if found is None and finding.kind == "nccl_warn":
        found = families.match(f"NCCL WARN {msg}")
    if found is None:
        return finding
    sig, attrs = found
    if sig.kind in _MEANINGS or finding.kind == "nccl_warn":
        severity = "critical" if finding.severity == "critical" else sig.severity
        return Finding(sig.kind, severity, {**attrs, "text": msg.strip()[:500]}, layer=sig.layer)
    if sig.kind == finding.kind:
        for key, value in attrs.items():
            finding.attrs.setdefault(key, value)
    return finding


def nccl_warn(msg: str, level: str) -> Finding:
    return _meaning(msg, _nccl_warn_words(msg, level))


def meaning_of(message: str) -> Finding | None:
    """What an NCCL message quoted by another program (PyTorch's ``Last error:``, nccl-tests' ``'... / last
    error'``) means when it says more than its result code: a setup, /dev/shm, allocation or NVLS failure,
    or a CUDA error; None when it says no more than the code."""
    said = nccl_warn(message, "WARN")
    return said if said.kind in _MEANINGS or said.kind == "cuda_error" else None


def _nccl_warn_words(msg: str, level: str) -> Finding:
    severity = "critical" if level == "ABORT" else "error"
    if m := _CUDA_FAILURE.search(msg):
        text = m.group("text")
        attrs: dict[str, Any] = {"error": text}
        if m.group("code"):
            attrs["cuda_error_code"] = int(m.group("code"))
        low = text.lower()
        if "out of memory" in low:
            attrs["oom"] = True
        if any(words in low for words in torch_dist.APP_FAULTS):
            attrs["app_fault"] = True
        return Finding("cuda_error", severity, attrs, layer="gpu")
    attrs = net_details(msg)
    if attrs or _NET_WORDS.search(msg):
        attrs.setdefault("text", msg.strip()[:500])
        return Finding("nccl_net_error", severity, attrs, layer="network_storage")
    return Finding("nccl_warn", "warning" if level == "WARN" else severity, {"text": msg.strip()[:500]})
