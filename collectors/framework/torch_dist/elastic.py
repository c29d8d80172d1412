"""torchrun / torch.distributed.elastic: ``failed (exitcode: N) local_rank: N (pid: N)``, ``Sending process N
closing signal SIGTERM``, exit-barrier timeouts, and the ChildFailedError ``Failures`` / ``Root Cause`` table."""

from __future__ import annotations

import signal
from typing import Any

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Continuation, Finding

_CHILD_FAILED = lazy_regex(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lrank>\d+) \(pid: (?P<pid>\d+)\)"
                           r"(?: of (?:binary|fn): (?P<binary>\S+))?")
_SENDING = lazy_regex(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG\w+)")
_GOT_SIGNAL = lazy_regex(r"(?:Process (?P<pid>\d+) got signal: (?P<num>\d+))|(?:Received (?P<sig>SIG\w+) death signal)")
_BARRIER = lazy_regex(r"Error waiting on exit barrier\. Elapsed: (?P<s>[\d.]+) seconds")
_SUMMARY_START = lazy_regex(r"ChildFailedError|^Root Cause \(first observed failure\):|^Failures:\s*$")


def signal_name(exitcode: int | None) -> str | None:
    """A negative torchrun exit code is the signal that killed the rank."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


def elastic_line(msg: str, lineno: int) -> tuple[Finding | None, Continuation | None] | None:
    """A torchrun line: a rank that failed, a signal sent or received, an exit-barrier timeout, or the start of
    the ChildFailedError table (then the table's reader)."""
    if m := _CHILD_FAILED.search(msg):
        code = int(m.group("code"))
        attrs: dict[str, Any] = {"exitcode": code, "local_rank": int(m.group("lrank")), "pid": int(m.group("pid"))}
        if m.group("binary"):
            attrs["binary"] = m.group("binary")
        if sig := signal_name(code):
            attrs["signal"] = sig
        return Finding("rank_failed", "error", attrs, layer="scheduling"), None
    if m := _SENDING.search(msg):
        return Finding("process_signal", "warning", {"pid": int(m.group("pid")), "signal": m.group("sig"),
                                                     "action": "sent"}, layer="scheduling"), None
    if m := _GOT_SIGNAL.search(msg):
        attrs = {"action": "received"}
        if m.group("pid"):
            attrs["pid"] = int(m.group("pid"))
            attrs["signal"] = signal_name(-int(m.group("num"))) or m.group("num")
        else:
            attrs["signal"] = m.group("sig")
        return Finding("process_signal", "warning", attrs, layer="scheduling"), None
    if m := _BARRIER.search(msg):
        return Finding("exit_barrier_timeout", "warning", {"elapsed_s": float(m.group("s"))}, layer="scheduling"), None
    if _SUMMARY_START.search(msg.strip()):
        summary = _ElasticSummary(lineno)
        summary.feed(msg, lineno)
        return None, summary
    return None


_ENTRY = lazy_regex(r"^\[(?P<n>\d+)\]:\s*$")
_FIELD = lazy_regex(r"^(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s*(?P<value>.*)$")
_RANK_FIELD = lazy_regex(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<lrank>-?\d+)\))?")
_EXIT_FIELD = lazy_regex(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_SIGNAL_TEXT = lazy_regex(r"Signal (?P<num>\d+) \((?P<sig>SIG\w+)\)")


class _ElasticSummary(Continuation):
    """The ChildFailedError report torchrun prints when a rank dies::

        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        train.py FAILED
        ------------------------------------------------------------
        Failures:
          <NO_OTHER_FAILURES>
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2026-08-13_08:21:19
          host      : zkrh-58
          rank      : 6 (local_rank: 6)
          exitcode  : -6 (pid: 1246013)
          error_file: <N/A>
          traceback : Signal 6 (SIGABRT) received by PID 1246013

    One ``rank_failed`` per entry (``root_cause`` true for the first observed failure) and one
    ``job_failed`` carrying the root cause's rank, host, exit code and signal."""

    budget = 80

    def __init__(self, lineno: int) -> None:
        self.first_line = lineno
        self.exception: str | None = None
        self.script: str | None = None
        self.section = "failures"
        self.entries: list[dict[str, Any]] = []
        self.in_traceback = False

    def feed(self, text: str, lineno: int) -> bool:
        stripped = text.strip()
        if "ChildFailedError" in stripped:
            self.exception = "ChildFailedError"
            return True
        if not stripped or set(stripped) <= {"=", "-"}:
            self.in_traceback = False
            return True
        if stripped.endswith(" FAILED") and " " not in stripped[:-7]:
            self.script = stripped[:-7]
            return True
        if stripped.startswith("Root Cause"):
            self.section = "root_cause"
            return True
        if stripped == "Failures:" or stripped == "<NO_OTHER_FAILURES>":
            self.section = "failures" if stripped == "Failures:" else self.section
            return True
        if m := _ENTRY.match(stripped):
            self.entries.append({"section": self.section, "line": lineno, "entry": int(m.group("n"))})
            self.in_traceback = False
            return True
        if self.entries and (m := _FIELD.match(stripped)):
            entry = self.entries[-1]
            entry[m.group("key")] = m.group("value").strip()
            self.in_traceback = m.group("key") == "traceback"
            return True
        if self.in_traceback and self.entries and text[:1].isspace():
            entry = self.entries[-1]
            if len(entry.get("traceback", "")) < 4000:
                entry["traceback"] = (entry.get("traceback", "") + "\n" + stripped).strip()
            return True
        return False

    def finish(self) -> list[Finding]:
        findings: list[Finding] = []
        root: Finding | None = None
        for entry in self.entries[:1024]:
            attrs: dict[str, Any] = {"root_cause": entry["section"] == "root_cause"}
            rank = None
            if m := _RANK_FIELD.match(entry.get("rank", "")):
                rank = int(m.group("rank"))
                attrs["rank"] = rank
                if m.group("lrank") is not None:
                    attrs["local_rank"] = int(m.group("lrank"))
            if m := _EXIT_FIELD.match(entry.get("exitcode", "")):
                attrs["exitcode"] = int(m.group("code"))
                if m.group("pid"):
                    attrs["pid"] = int(m.group("pid"))
            for key in ("time", "error_file", "traceback"):
                if entry.get(key):
                    attrs[key] = entry[key]
            sig = signal_name(attrs.get("exitcode"))
            if m := _SIGNAL_TEXT.search(entry.get("traceback", "")):
                sig = m.group("sig")
            if sig:
                attrs["signal"] = sig
            if self.script:
                attrs["script"] = self.script
            finding = Finding("rank_failed", "error", attrs, layer="scheduling", rank=rank,
                              host=entry.get("host") or None, line=entry["line"])
            findings.append(finding)
            if attrs["root_cause"] and root is None:
                root = finding
        if findings or self.exception or self.script:
            attrs = {"exception": self.exception, "script": self.script}
            if root is not None:
                for key in ("rank", "local_rank", "exitcode", "signal", "time", "pid"):
                    if key in root.attrs:
                        attrs[f"root_cause_{key}" if key != "signal" and key != "exitcode" else key] = root.attrs[key]
                attrs["root_cause_host"] = root.host
            findings.append(Finding("job_failed", "critical", {k: v for k, v in attrs.items() if v is not None},
                                    layer="scheduling", rank=root.rank if root else None,
                                    host=root.host if root else None, line=self.first_line))
        return findings
