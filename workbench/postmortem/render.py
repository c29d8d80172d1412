"""The postmortem model as Markdown, self-contained HTML or JSON, with the templates shipped in
``workbench/postmortem/templates``.

Evidence is data: templates receive it as values and never evaluate it, HTML is autoescaped, and the
Markdown environment refuses any value that did not pass through one of its escaping filters.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from collectors.framework.vocabulary import LAYER_TITLES
from workbench.postmortem.humanize import fmt_duration, fmt_ms, fmt_size, fmt_ts
from workbench.times import iso

FORMATS = ("md", "html", "json")


class MdSafe(str):
    """Text already escaped for Markdown; the only kind of value the Markdown template may output."""


_MD_SPECIAL = re.compile(r"[\\`*{}\[\]<>#|!~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|&(?=[A-Za-z0-9#])")
"""Characters that can start Markdown or HTML syntax inline. An underscore between two letters or
digits cannot open emphasis and an ampersand not followed by a name cannot start an entity, so
identifiers like ``gpu_fell_off_bus`` stay readable in the raw file."""
_MD_LINE_START = re.compile(r"^([-+]|\d{1,9}[.)])(?=\s|$)")


def md_text(value: Any) -> MdSafe:
    """Prose from people or evidence, inline: Markdown and HTML syntax characters backslash-escaped,
    newlines folded, so it renders as the literal text wherever it lands (list item, table cell)."""
    text = " ".join(str("" if value is None else value).split())
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text)
    text = _MD_LINE_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], text)
    return MdSafe(text)


def md_code(value: Any, table: bool = False) -> MdSafe:
    """Machine text (log lines, ids) as an inline code span: literal, even with backticks in it.
    In a table cell the pipes are escaped too (GFM splits cells before reading code spans)."""
    text = " ".join(str("" if value is None else value).split()) or " "
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    if table:
        text = text.replace("|", "\\|")
    return MdSafe(f"{fence}{pad}{text}{pad}{fence}")


def md_block(value: Any, indent: int = 0) -> MdSafe:
    """Raw evidence as a fenced code block (fence longer than any backtick run inside), indented to
    sit inside a list item."""
    text = str("" if value is None else value).replace("\r", "")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=2)
    fence = "`" * max(3, longest + 1)
    pad = " " * indent
    lines = [f"{fence}text", *text.split("\n"), fence]
    return MdSafe("\n".join(pad + line for line in lines))


def _md_finalize(value: Any) -> Any:
    if isinstance(value, (MdSafe, int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(f"markdown template printed an unescaped value {value!r:.60}; pass it through md/code/block")


def _environment(fmt: str) -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    common = {"loader": PackageLoader("workbench.postmortem", "templates"), "undefined": StrictUndefined,
              "trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}
    if fmt == "html":
        env = Environment(autoescape=True, **common)
    else:
        env = Environment(autoescape=False, finalize=_md_finalize, **common)
        env.filters.update(md=md_text, code=md_code, block=md_block)
        env.filters.update(ts=lambda v, approx=False: md_text(fmt_ts(v, approx)),
                           dur=lambda v: md_text(fmt_duration(v)), size=lambda v: md_text(fmt_size(v)),
                           ms=lambda v: md_text(fmt_ms(v)))
    if fmt == "html":
        env.filters.update(ts=fmt_ts, dur=fmt_duration, size=fmt_size, ms=fmt_ms)
    env.globals.update(LAYER_TITLES=LAYER_TITLES)
    return env


def render(model: dict[str, Any], fmt: str) -> str:
    """The model as Markdown (``md``), self-contained HTML (``html``) or JSON (``json``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; one of: {', '.join(FORMATS)}")
    if fmt == "json":
        data = {k: v for k, v in model.items() if k != "charts"}
        return json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n"
    return _environment(fmt).get_template(f"report.{fmt}.j2").render(r=model)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value, "auto")
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)
