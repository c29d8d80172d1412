"""A timeline filter typed as one line: ``host:node03,node04 layer:gpu sev:error since:09:10 xid 79``.

Words of the form ``name:value`` narrow one facet (values separated by commas, or the word
repeated); everything else is searched in the message. The Timeline screen's ``/`` box reads this,
and :func:`describe` writes a filter back in the same words, so what the screen shows can be typed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, time, timezone

from collectors.framework.vocabulary import LAYERS, SEVERITIES
from workbench.errors import InputError
from workbench.query.events import EventFilter
from workbench.timespec import parse_instant

_FACETS = {"host": "hosts", "source": "sources", "src": "sources", "layer": "layers", "kind": "kinds",
           "sev": "severities", "severity": "severities", "rank": "ranks", "gpu": "gpu", "since": "since",
           "until": "until", "from": "since", "to": "until"}
LAYER_ALIASES = {"biz": "business", "sched": "scheduling", "net": "network_storage", "network": "network_storage",
                 "storage": "network_storage", "hw": "hardware", "driver": "gpu"}


def parse_filter(text: str, *, reference: datetime | None = None) -> EventFilter:
    """The filter a line describes. A bare time (``09:10``) is taken on ``reference``'s day (UTC)."""
    flt = EventFilter()
    free: list[str] = []
    for word in text.split():
        name, sep, value = word.partition(":")
        field = _FACETS.get(name.lower()) if sep else None
        if field is None or not value:
            free.append(word)
            continue
        if field in ("since", "until"):
            flt = replace(flt, **{field: _instant(value, reference)})
        elif field == "gpu":
            flt = replace(flt, gpu=value)
        elif field == "ranks":
            try:
                ranks = tuple(int(v) for v in value.split(",") if v)
            except ValueError:
                raise InputError(f"rank:{value} is not a rank number (e.g. rank:19 or rank:3,7)") from None
            flt = replace(flt, ranks=flt.ranks + ranks)
        else:
            values = tuple(_checked(field, v) for v in value.split(",") if v)
            flt = replace(flt, **{field: getattr(flt, field) + values})
    text_part = " ".join(free).strip()
    return replace(flt, text=text_part or None)


def _checked(field: str, value: str) -> str:
    if field == "layers":
        value = LAYER_ALIASES.get(value.lower(), value.lower())
        if value not in LAYERS:
            raise InputError(f"layer:{value} is not a layer; one of {', '.join(LAYERS)}")
    if field == "severities":
        value = value.lower()
        if value not in SEVERITIES:
            raise InputError(f"sev:{value} is not a severity; one of {', '.join(SEVERITIES)}")
    return value


def _instant(value: str, reference: datetime | None) -> datetime:
    try:
        clock = time.fromisoformat(value)
    except ValueError:
        return parse_instant(value)
    day = (reference or datetime.now(timezone.utc)).date()
    return datetime.combine(day, clock)


def describe(flt: EventFilter) -> str:
    """The filter in the words :func:`parse_filter` reads."""
    words: list[str] = []
    for name, field in (("host", "hosts"), ("source", "sources"), ("layer", "layers"), ("kind", "kinds"),
                        ("sev", "severities")):
        values = getattr(flt, field)
        if values:
            words.append(f"{name}:{','.join(values)}")
    if flt.ranks:
        words.append("rank:" + ",".join(str(r) for r in flt.ranks))
    if flt.gpu:
        words.append(f"gpu:{flt.gpu}")
    for name in ("since", "until"):
        value = getattr(flt, name)
        if value is not None:
            words.append(f"{name}:{value.isoformat(timespec='seconds')}")
    if flt.text:
        words.append(flt.text)
    return " ".join(words)
