"""``nvidia-smi -q -x``: the XML of DTD nvsmi_device_v10 through v13, read incrementally, often cut short."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator

from collectors.base import Row, Skipped
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Block, Clock, TextParser, integer
from collectors.nvidia_smi.tree import Node, gpu_rows, parse_ctime

MAX_XML_DEPTH = 32
"""nvidia-smi XML nests about 6 deep; anything far deeper is junk, refused before it costs recursion."""
XML_START = lazy_regex(r"^\s*<(?:\?xml|!DOCTYPE\s+nvidia_smi_log|nvidia_smi_log)")
_XML_GPU = lazy_regex(r"^\s*<gpu[\s>]")
"""A <gpu> element starting its line: where reading resumes after a damaged one."""


def open_xml(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if XML_START.match(line):
        return parser.open(XmlBlock(parser), n, line)
    return None


class XmlBlock(Block):
    """``nvidia-smi -q -x``: parsed incrementally, each <gpu> turned into rows when it closes. A
    document cut short (pasted excerpts often are, and so is the output of an nvidia-smi killed at its
    deadline) still yields the GPU it was inside. A well-formedness error is one counted skip: the GPU it
    is in yields what was read of it, its other lines are passed over, and the next ``<gpu`` line starts
    a fresh parser, so one damaged GPU costs no other."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.xml = ET.XMLPullParser(events=("start", "end"))
        self.lines: dict[int, int] = {}
        self.depth = 0
        self.open_gpu: ET.Element | None = None
        self.header: dict[str, str] = {}
        self.dtd: str | None = None
        self.broken = False
        self.done = False
        self.clock = Clock()

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if self.done:
            return [], False
        if self.broken:
            if _XML_GPU.match(line):
                self._resume()
            elif line.strip() == "</nvidia_smi_log>":
                self.done = True
                return [], True
            elif line.strip().startswith("<") or not line.strip() or line[:1].isspace():
                return [], True  # the damaged GPU's lines: markup, or text indented inside an element
            else:
                return [], False
        if (m := re.search(r'SYSTEM\s+"([\w.]+)\.dtd"', line)) and self.dtd is None:
            self.dtd = m.group(1)
        rows: list[Row] = []
        try:
            self.xml.feed(line + "\n")
            rows.extend(self._events(n))
        except ET.ParseError as exc:
            self.broken = True
            rows.append(Skipped(n, "XML not well-formed: " + re.sub(r": line \d+, column \d+", "", str(exc))[:60]))
            rows.extend(self._partial())
        return rows, True

    def _resume(self) -> None:
        """A fresh parser for the rest of the document, as if inside its root again: entities the damaged
        part declared are not known to it (an undefined one is one more well-formedness error)."""
        self.xml = ET.XMLPullParser(events=("start", "end"))
        self.xml.feed("<nvidia_smi_log>\n")
        self.depth, self.broken, self.open_gpu, self.lines = 0, False, None, {}
        list(self._events(0))

    def _events(self, n: int) -> Iterator[Row]:
        for event, elem in self.xml.read_events():
            if event == "start":
                self.depth += 1
                if self.depth > MAX_XML_DEPTH:
                    raise ET.ParseError(f"nesting deeper than {MAX_XML_DEPTH}")
                self.lines[id(elem)] = n
                if elem.tag == "gpu" and self.depth == 2:
                    self.open_gpu = elem
                continue
            self.depth -= 1
            if self.depth == 1 and elem.tag in ("timestamp", "driver_version", "cuda_version", "attached_gpus"):
                self.header[elem.tag] = (elem.text or "").strip()
                if elem.tag == "timestamp" and (when := parse_ctime(self.header["timestamp"])):
                    self.clock = Clock(when, "localtime", True, self.header["timestamp"])
                    self.p.ctx.learn_reference_time(self.p.host or self.p.ctx.host, when)
            elif self.depth == 1 and elem.tag == "gpu":
                yield from self._gpu(elem)
                self.open_gpu = None
                elem.clear()
                self.lines = {k: v for k, v in self.lines.items() if v >= n - 1}
            elif self.depth == 0:
                self.done = True

    def _gpu(self, elem: ET.Element) -> Iterator[Row]:
        tree = self._node(elem)
        clock = self.clock if self.clock.ts else self.p.clock()
        driver = self.header.get("driver_version") or None
        cuda = self.header.get("cuda_version") or None
        yield from gpu_rows(tree, bus=elem.get("id"), clock=clock, host=self.p.host, driver=driver, cuda=cuda,
                            tracker=self.p.tracker, source="nvidia-smi -q -x", line=self.lines.get(id(elem)),
                            extra={"dtd": self.dtd, "attached_gpus": integer(self.header.get("attached_gpus"))})

    def _node(self, elem: ET.Element, depth: int = 0) -> Node:
        text = (elem.text or "").strip()
        children = [self._node(c, depth + 1) for c in elem] if depth < MAX_XML_DEPTH else []
        return Node(elem.tag.lower(), text or None, self.lines.get(id(elem)), children)

    def _partial(self) -> list[Row]:
        if self.open_gpu is None:
            return []
        rows = list(self._gpu(self.open_gpu))
        self.open_gpu = None
        return rows

    def close(self) -> list[Row]:
        if self.done or self.broken:
            return []
        return self._partial()

