"""Known messages recognised on every line of every text artifact, whatever its format: the catalog
of collectors/catalog/signatures/.

A format parser knows the lines of its own format; a known message (a CUDA error, a vLLM engine
failure, a cgroup OOM kill, an Xid) also arrives pasted into an issue, inside a container's log, in
a file no sniffer recognised. The catalog is data, like lnav's formats: each signature has a regex
whose named groups become attrs, a kind, a layer, a severity, the cause it points to, literal
anchors, and at least two real sample lines with their source (the loader refuses fewer).

Cost: all anchors are compiled into one RE2 alternation run over raw byte blocks (a DFA, ~800 MB/s
here, against ~30 MB/s for Python's ``re`` with the same alternation), so only lines holding an
anchor are decoded, framed (collectors/framework/framing/) and matched against the few signatures whose
anchors they hold.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from collectors.base import LAYERS, SEVERITIES, Event, normalize_pci
from collectors.catalog.parsed import parsed_yaml
from collectors.framework.code_tables import CodeTable, CodeTableError, code_table
from collectors.framework.framing import Framed, frame_lines, parse_iso, peel

CATALOG = Path(__file__).resolve().parents[1] / "catalog" / "signatures"
"""One YAML file per family; the format is FORMAT.md beside them."""
DEFAULT_PRECEDENCE = 50
MIN_SAMPLES = 2
BLOCK_BYTES = 4 << 20
MAX_LINE = 64 << 10
"""Only the first 64 KiB of a line are matched: a known message is never longer."""
NEIGHBOUR_LINES = 32
SAME_LABEL_LINES = 32
"""In an ``srun -l`` file, how many time-like lines of an undated line's own label it tries, each way."""
_SRUN_LABEL = re.compile(rb"([ \t]{0,4}\d{1,5}): (?=\S)")
_LABELLED_STAMP_LIKE = re.compile(rb"^([ \t]{0,4}\d{1,5}): (?=\S)[^\n]*?\d[:.]\d\d", re.M)
FIELDS = {"id", "kind", "layer", "severity", "severity_when", "cause", "anchors", "regex", "also", "attrs", "types",
          "lists", "continues", "parsed_as", "samples", "meaning", "precedence", "not_alone", "table"}
MAX_CONTINUATION = 64
TYPES = ("int", "float", "size", "hex")

STRUCTURED_KINDS = frozenset({
    "sacct_json", "slurm_json", "k8s_events_json", "k8s_pods_json", "k8s_nodes_json", "k8s_json", "k8s_yaml",
    "nvidia_smi_xml", "nvidia_smi_csv", "nvml_json", "prom_text", "prom_api_json", "metrics_csv", "dcgm_dmon",
    "iostat", "diskstats", "proc_stat", "proc_uptime", "pip_freeze", "bench_summary"})
"""Artifacts whose parsers read a structure, not lines of text: the catalog does not run over them."""


class SignatureError(ValueError):
    """collectors/catalog/signatures/ is malformed: named with the signature and the field."""


@dataclass(frozen=True)
class Sample:
    line: str
    source: str
    filled: bool = False
    """the source's format string filled in (no real line was published), not a line seen in the wild"""


@dataclass(frozen=True)
class Signature:
    """One known message."""

    id: str
    kind: str
    layer: str
    severity: str
    cause: str | None
    anchors: tuple[str, ...]
    pattern: str
    """the regex's text; compiled on first use (:attr:`regex`): a run compiles only the signatures
    whose anchors its lines hold, not the whole catalog"""
    also_patterns: tuple[str, ...]
    """further regexes whose named groups add attrs when they match (:attr:`also`)"""
    severity_when: dict[str, dict[str, str]]
    """attr -> {value: severity}: a UE is critical where a CE is a warning"""
    attrs: dict[str, Any]
    """constant attrs every match carries (``oom: true``)"""
    types: dict[str, str]
    """named groups that are numbers: int, float, hex, or size (``3.00 GiB``, adds ``<name>_mib``)"""
    parsed_as: tuple[str, ...]
    """kinds a format parser may already have written for the same line (then this one is not written)"""
    list_patterns: dict[str, str]
    """attr -> regex with one group: the attr is every match of the group in the line (and its
    continuation) (:attr:`lists`)"""
    continues_pattern: str | None
    """lines after the matched one that belong to it (NCCL prints its interface list one per line)"""
    samples: tuple[Sample, ...]
    meaning: str = ""
    family: str = ""
    """the catalog file it comes from: a component or message class (cuda, nccl, kernel, ...)"""
    not_alone: str = ""
    """why this message alone does not rank its cause first (empty: it does, and a test holds it to that)"""
    table: CodeTable | None = None
    """the error-code table a match is resolved through (name, code, message, meaning, cause)"""

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    @cached_property
    def also(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.also_patterns)

    @cached_property
    def lists(self) -> dict[str, re.Pattern[str]]:
        return {name: re.compile(p) for name, p in self.list_patterns.items()}

    @cached_property
    def continues(self) -> re.Pattern[str] | None:
        return re.compile(self.continues_pattern) if self.continues_pattern else None

    def match(self, body: str) -> dict[str, Any] | None:
        """The attrs of a match on a line's body, or None."""
        m = self.regex.search(body)
        if m is None:
            return None
        attrs: dict[str, Any] = dict(self.attrs)
        for extra in self.also:
            if found := extra.search(body):
                self._typed(found, attrs)
        self._typed(m, attrs)
        for name, item in self.lists.items():
            if found := item.findall(body):
                attrs[name] = found
        attrs["signature"] = self.id
        cause = self.cause
        if self.table is not None:
            entry = self.table.resolve(attrs, body)
            if entry is None:
                return None
            printed = attrs.get("code")
            attrs.update(entry.attrs)
            attrs.update(name=entry.name, code=entry.code, error=entry.message, api=entry.api, meaning=entry.meaning)
            if isinstance(printed, int) and printed != entry.code:
                attrs["printed_code"] = printed
            cause = entry.cause or cause
        if cause:
            attrs["causes"] = [cause]
        return attrs

    def severity_of(self, attrs: dict[str, Any]) -> str:
        if self.table is not None and (entry := self.table.by_name.get(str(attrs.get("name")))):
            return entry.severity
        for name, by_value in self.severity_when.items():
            if str(attrs.get(name)) in by_value:
                return by_value[str(attrs.get(name))]
        return self.severity

    def _typed(self, m: re.Match[str], attrs: dict[str, Any]) -> None:
        for name, value in m.groupdict().items():
            if value is None:
                continue
            kind = self.types.get(name)
            if kind is None:
                attrs[name] = value.strip()
            elif kind == "size":
                attrs[name] = value.strip()
                attrs[f"{name}_mib"] = to_mib(value)
            else:
                attrs[name] = _number(value, kind)


def load_signatures(path: Path = CATALOG) -> tuple[Signature, ...]:
    """Every signature of the catalog (a folder of family files, or one file), validated and in the
    order lines are matched: (precedence, family, position in its file). Raises SignatureError naming
    the bad entry."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    if not files:
        raise SignatureError(f"{path}: no signature files")
    # The parsed files are kept (collectors/catalog/parsed.py) only once they passed _signatures with
    # every regex compiled; from the kept copy the regexes compile on first use.
    docs = parsed_yaml(files, lambda docs: _signatures(files, docs, compile_now=True))
    return _signatures(files, docs, compile_now=False)


def _signatures(files: list[Path], docs: list[Any], *, compile_now: bool) -> tuple[Signature, ...]:
    ranked: list[tuple[int, str, int, Signature]] = []
    seen: dict[str, str] = {}
    for file, doc in zip(files, docs, strict=True):
        entries = doc.get("signatures") if isinstance(doc, dict) else None
        if not isinstance(entries, list) or not entries:
            raise SignatureError(f"{file.name}: a top-level 'signatures' list is required")
        family = str(doc.get("family") or file.stem)
        precedence = doc.get("precedence", DEFAULT_PRECEDENCE)
        if not isinstance(precedence, int) or family != file.stem:
            raise SignatureError(f"{file.name}: 'family' must be the file's name and 'precedence' a whole number")
        for i, entry in enumerate(entries):
            sig = _signature(entry, f"{file.name} entry {i + 1}", family, compile_now=compile_now)
            if sig.id in seen:
                raise SignatureError(f"{file.name}: signature id {sig.id!r} is also given in {seen[sig.id]}")
            seen[sig.id] = file.name
            own = entry.get("precedence", precedence)
            if not isinstance(own, int):
                raise SignatureError(f"{file.name} ({sig.id}): 'precedence' must be a whole number")
            ranked.append((own, family, i, sig))
    return tuple(sig for *_, sig in sorted(ranked, key=lambda r: r[:3]))


def _signature(entry: Any, where: str, family: str = "", *, compile_now: bool = True) -> Signature:
    """One entry, checked; with ``compile_now`` (a catalog file just parsed) its regexes are compiled
    and what depends on their groups is checked too, else (the same file, checked before) they compile
    on first use."""
    if not isinstance(entry, dict):
        raise SignatureError(f"{where}: a mapping is required")
    where = f"{where} ({entry.get('id', '?')})"
    unknown = set(entry) - FIELDS
    if unknown:
        raise SignatureError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("id", "kind", "layer", "severity", "regex"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise SignatureError(f"{where}: '{key}' (text) is required")
    if entry["layer"] not in LAYERS:
        raise SignatureError(f"{where}: layer {entry['layer']!r} is not one of {', '.join(LAYERS)}")
    if entry["severity"] not in SEVERITIES:
        raise SignatureError(f"{where}: severity {entry['severity']!r} is not one of {', '.join(SEVERITIES)}")
    groups: set[str] | None = None
    if compile_now:
        try:
            regex = re.compile(entry["regex"])
            also = tuple(re.compile(r) for r in entry.get("also") or ())
        except (re.error, TypeError) as exc:
            raise SignatureError(f"{where}: regex does not compile: {exc}") from None
        groups = set(regex.groupindex).union(*(a.groupindex for a in also))
    severity_when = entry.get("severity_when") or {}
    if not isinstance(severity_when, dict) or any(
            (groups is not None and k not in groups) or not isinstance(v, dict)
            or not set(map(str, v.values())) <= set(SEVERITIES)
            for k, v in severity_when.items()):
        raise SignatureError(f"{where}: severity_when must map a group of the regex to {{value: severity}}")
    anchors = entry.get("anchors")
    if not isinstance(anchors, list) or not anchors or not all(isinstance(a, str) and len(a) >= 3 for a in anchors):
        raise SignatureError(f"{where}: 'anchors' must list literal texts of 3 characters or more")
    types = entry.get("types") or {}
    bad = {k: v for k, v in types.items() if v not in TYPES or (groups is not None and k not in groups)}
    if bad:
        raise SignatureError(f"{where}: types {bad} name no group of the regex or no type of {', '.join(TYPES)}")
    lists = {str(k): v for k, v in (entry.get("lists") or {}).items()}
    if compile_now:
        try:
            if any(re.compile(v).groups != 1 for v in lists.values()):
                raise SignatureError(f"{where}: each 'lists' regex needs exactly one group")
            if entry.get("continues"):
                re.compile(entry["continues"])
        except (re.error, TypeError) as exc:
            raise SignatureError(f"{where}: lists/continues regex does not compile: {exc}") from None
    samples = entry.get("samples")
    if not isinstance(samples, list) or len(samples) < MIN_SAMPLES:
        raise SignatureError(f"{where}: at least {MIN_SAMPLES} real sample lines with their source are required")
    try:
        table = code_table(str(entry["table"])) if entry.get("table") is not None else None
    except CodeTableError as exc:
        raise SignatureError(f"{where}: {exc}") from None
    parsed: list[Sample] = []
    for sample in samples:
        if not isinstance(sample, dict) or not isinstance(sample.get("line"), str) \
                or not isinstance(sample.get("source"), str) or not sample["source"].strip():
            raise SignatureError(f"{where}: each sample needs 'line' and 'source' (a URL or a tests/ path)")
        parsed.append(Sample(sample["line"], sample["source"], bool(sample.get("filled"))))
    return Signature(id=entry["id"], kind=entry["kind"], layer=entry["layer"], severity=entry["severity"],
                     cause=entry.get("cause"), anchors=tuple(anchors), pattern=entry["regex"],
                     also_patterns=tuple(entry.get("also") or ()),
                     severity_when={k: {str(a): str(b) for a, b in v.items()} for k, v in severity_when.items()},
                     attrs=dict(entry.get("attrs") or {}), list_patterns=lists,
                     continues_pattern=entry.get("continues") or None,
                     types=dict(types), parsed_as=tuple(entry.get("parsed_as") or ()), samples=tuple(parsed),
                     meaning=str(entry.get("meaning") or ""), family=family,
                     not_alone=str(entry.get("not_alone") or ""), table=table)


@cache
def catalog() -> Matcher:
    """The matcher of collectors/catalog/signatures/, built once per process."""
    return Matcher(load_signatures())


class Matcher:
    """The catalog compiled: one RE2 prefilter of every anchor, then the signatures a line's anchors name."""

    def __init__(self, signatures: tuple[Signature, ...]) -> None:
        import re2  # deferred: a C++ DFA that only ingest needs

        self.signatures = signatures
        anchors = sorted({a for s in signatures for a in s.anchors}, key=len, reverse=True)
        options = re2.Options()
        options.max_mem = 64 << 20
        self.prefilter = re2.compile("|".join(re.escape(a) for a in anchors).encode(), options)
        self.by_anchor: dict[bytes, list[int]] = {}
        for i, sig in enumerate(signatures):
            for anchor in sig.anchors:
                self.by_anchor.setdefault(anchor.encode(), []).append(i)

    def match(self, body: str, written: set[str] | frozenset[str] = frozenset()
              ) -> tuple[Signature, dict[str, Any]] | None:
        """The first signature (catalog order) that matches a message body, with its attrs; None also
        when that first one is of a kind in ``written`` or parsed as one (a format parser wrote it)."""
        return self._first(body.encode("utf-8", "replace"), body, written)

    def _first(self, raw: bytes, body: str, written: set[str] | frozenset[str] = frozenset()
               ) -> tuple[Signature, dict[str, Any]] | None:
        # The anchors the prefilter finds name the only signatures worth trying; no anchor of the
        # catalog is inside another one (tests/collectors/test_signatures.py), so none hides another.
        candidates = sorted({i for hit in self._anchors_in(raw) for i in self.by_anchor[hit]})
        for i in candidates:
            sig = self.signatures[i]
            if written and (sig.kind in written or written.intersection(sig.parsed_as)):
                if sig.regex.search(body):  # the first match is one already written: no attrs to build
                    return None
                continue
            attrs = sig.match(body)
            if attrs is not None:
                return sig, attrs
        return None

    def _anchors_in(self, raw: bytes) -> list[bytes]:
        return [raw[start:stop] for start, stop in spans(self.prefilter, raw)]

    def scan(self, stream: BinaryIO, *, reference: datetime | None = None, boot: datetime | None = None,
             parsed: dict[int, set[str]] | None = None) -> Iterator[Event]:
        """Events for every line of ``stream`` that a signature recognises; ``parsed`` maps a line
        number to the kinds a format parser already wrote for it (those are not written twice)."""
        parsed = parsed or {}
        first_line = 1
        carry = done = b""
        while True:
            chunk = stream.read(BLOCK_BYTES)
            data = carry + chunk
            if not data:
                return
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            if cut == 0:
                if len(data) < 4 * BLOCK_BYTES:
                    carry = data
                    continue
                cut = len(data)
            block, carry = data[:cut], data[cut:]
            first_line += done.count(b"\n")  # the lines of the block before, counted only if one follows
            done = block
            yield from self._block(block, first_line, reference, boot, parsed)
            if not chunk:
                return

    def _block(self, block: bytes, first_line: int, reference: datetime | None, boot: datetime | None,
               parsed: dict[int, set[str]]) -> Iterator[Event]:
        counted_to, line_no, last_start = 0, first_line, -1
        for hit in self.prefilter.finditer(block):
            start = block.rfind(b"\n", 0, hit.start()) + 1
            if start == last_start:
                continue
            last_start = start
            line_no += block.count(b"\n", counted_to, start)
            counted_to = start
            end = block.find(b"\n", start)
            end = len(block) if end < 0 else end
            raw = block[start:min(end, start + MAX_LINE)]
            text = raw.decode("utf-8", "replace").rstrip("\r")
            framed = peel(text, line_no, reference=reference, boot=boot)
            for piece in framed.message.split("#012"):
                found = self._first(piece.encode("utf-8", "replace"), piece)
                if found is None:
                    continue
                sig, attrs = found
                done = parsed.get(line_no, ())
                if sig.kind in done or any(k in done for k in sig.parsed_as):
                    break
                if sig.continues is not None:
                    piece = _continued(sig, piece, block, end)
                    attrs = sig.match(piece) or attrs
                if framed.ts is None:
                    _date_from_neighbours(framed, block, start, end, reference, boot)
                yield event_of(sig, attrs, framed, piece)
                break


def spans(regex: Any, data: Any, limit: int | None = None, pos: int = 0,
          end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of the matches of a google-re2 ``regex`` in ``data[pos:end]`` (any buffer: bytes, a
    mapped file), as its ``finditer`` finds them (leftmost, not overlapping), at most ``limit`` of them,
    through the RE2 object itself: the wrapper's generator and match objects cost ~5 us a match, most of
    what a kernel candidate line costs to match."""
    import re2

    search, unanchored = regex._regexp.Match, re2._Anchor.UNANCHORED
    found: list[tuple[int, int]] = []
    end = len(data) if end is None else end
    while pos <= end and (limit is None or len(found) < limit):
        start, stop = search(unanchored, data, pos, end)[0]
        if start < 0:
            break
        found.append((start, stop))
        pos = stop if stop > start else stop + 1
    return found


def _continued(sig: Signature, body: str, block: bytes, end: int) -> str:
    """The matched line and the lines after it that continue it (within this block)."""
    parts = [body]
    pos = end + 1
    for _ in range(MAX_CONTINUATION):
        if pos >= len(block):
            break
        nxt = block.find(b"\n", pos)
        nxt = len(block) if nxt < 0 else nxt
        line = peel(block[pos:nxt].decode("utf-8", "replace").rstrip("\r")).message.strip()
        if not sig.continues.fullmatch(line):
            break
        parts.append(line)
        pos = nxt + 1
    return " ".join(parts)


def _date_from_neighbours(framed: Framed, block: bytes, start: int, end: int, reference: datetime | None,
                          boot: datetime | None) -> None:
    """An undated line takes the time of the nearest dated line around it (``dmesg -H`` deltas
    added up), marked approximate; nothing dated nearby leaves it undated."""
    lo = start
    for _ in range(NEIGHBOUR_LINES):
        if lo == 0:
            break
        lo = block.rfind(b"\n", 0, lo - 1) + 1
    before = block[lo:start].decode("utf-8", "replace").splitlines()
    line = block[start:end].decode("utf-8", "replace")
    window = list(frame_lines([*before, line], reference=reference, boot=boot))
    last = window[-1] if window else None
    if last is None or last.ts is None:
        hi = end
        for _ in range(NEIGHBOUR_LINES):
            nxt = block.find(b"\n", hi + 1)
            if nxt < 0:
                hi = len(block)
                break
            hi = nxt
        after = block[end:hi].decode("utf-8", "replace").splitlines()
        dated = next((f for f in frame_lines(after, reference=reference, boot=boot) if f.ts is not None
                      and f.ts_origin != "neighbour"), None) or _same_label_dated(block, start, end, reference, boot)
        if dated is None:
            return
        framed.ts, framed.ts_origin, framed.ts_approx = dated.ts, "neighbour", True
        return
    framed.ts, framed.ts_approx = last.ts, True
    framed.ts_origin = last.ts_origin if last.ts_origin == "dmesg_human" else "neighbour"


def _same_label_dated(block: bytes, start: int, end: int, reference: datetime | None,
                      boot: datetime | None) -> Framed | None:
    """The nearest dated line of the same ``srun -l`` label (before the line, else after it): in an interleaved
    job log the lines around an undated one are other ranks', and its own rank's last stamp may be far back."""
    m = _SRUN_LABEL.match(block, start, end)
    if m is None:
        return None
    starts = _stamp_like_lines(block).get(m.group(1), [])
    i = bisect_left(starts, start)
    after = i + 1 if i < len(starts) and starts[i] == start else i
    for pos in [*reversed(starts[max(0, i - SAME_LABEL_LINES):i]), *starts[after:after + SAME_LABEL_LINES]]:
        line_end = block.find(b"\n", pos)
        raw = block[pos:len(block) if line_end < 0 else min(line_end, pos + MAX_LINE)]
        framed = peel(raw.decode("utf-8", "replace").rstrip("\r"), reference=reference, boot=boot)
        if framed.ts is not None:
            return framed
    return None


@lru_cache(maxsize=1)
def _stamp_like_lines(block: bytes) -> dict[bytes, list[int]]:
    """Starts of the block's lines that may carry a time (a digit, ':' or '.', two digits), by ``srun -l``
    label: one pass over a block, however many of its undated lines ask."""
    found: dict[bytes, list[int]] = {}
    for m in _LABELLED_STAMP_LIKE.finditer(block):
        found.setdefault(m.group(1), []).append(m.start())
    return found


def event_of(sig: Signature, attrs: dict[str, Any], framed: Framed, body: str) -> Event:
    """The timeline event of one match; an Xid takes its name, meaning, layer and causes from the Xid catalog."""
    layer, severity = sig.layer, sig.severity_of(attrs)
    if sig.kind == "xid" and isinstance(attrs.get("xid"), int):
        info = _xid_info(attrs["xid"])
        layer, severity = info.pop("layer"), info.pop("severity")
        attrs = {**info, **attrs}
    pci = attrs.get("pci") if "nvswitch" not in attrs else None  # an NVSwitch's bus id names no GPU
    ts, origin, approx, raw = framed.ts, framed.ts_origin, framed.ts_approx, framed.ts_raw
    stamp = attrs.pop("at", None)  # the message's own time (Slurm's "CANCELLED AT 2020-12-14T09:44:56")
    if isinstance(stamp, str) and (when := parse_iso(stamp)) is not None and (ts is None or approx):
        ts, origin, approx, raw = when, "message", False, stamp
    return Event(kind=sig.kind, message=body.strip()[:2000], ts=ts, ts_origin=origin,
                 ts_approx=approx, ts_raw=raw, host=framed.host, layer=layer,
                 severity=severity, gpu=normalize_pci(pci) if isinstance(pci, str) else None, rank=framed.rank,
                 attrs=attrs, line=framed.line)


def _xid_info(code: int) -> dict[str, Any]:
    """What the Xid catalog says about a code, so an Xid found in any wrapper reads like the kernel's."""
    from collectors.framework.xid_catalog import lookup

    info = lookup(code)
    return {"name": info.name, "meaning": info.meaning, "action": info.action, "follower": info.follower,
            "causes": list(info.causes), "layer": info.layer, "severity": info.severity}


_UNITS = {"b": 1 / (1 << 20), "kb": 1 / 1024, "kib": 1 / 1024, "mb": 1.0, "mib": 1.0, "gb": 1024.0, "gib": 1024.0,
          "tb": float(1 << 20), "tib": float(1 << 20)}


def to_mib(text: str) -> float | None:
    """``3.00 GiB`` -> 3072.0 (PyTorch prints binary units, sometimes spelled GB)."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?i?B)\s*", text, re.IGNORECASE)
    if not m:
        return None
    try:
        return round(float(m.group(1)) * _UNITS[m.group(2).lower()], 2)
    except (ValueError, KeyError):
        return None


def _number(value: str, kind: str) -> int | float | str:
    try:
        if kind == "int":
            return int(value)
        if kind == "hex":
            return int(value, 16)
        return float(value)
    except ValueError:
        return value
