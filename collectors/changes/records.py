"""Deploy / config / model records handed over with ``--changes FILE`` (CSV or JSON): one ``change`` event per record,
its fields found under the names people give them."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, BinaryIO

from collectors.base import Event, ParseContext, Row, Skipped, to_utc
from collectors.changes.events import change_event, layer_for, names_gpu_stack
from collectors.framework.json_items import ITEM_ERRORS, decoded

MAX_RECORDS_BYTES = 64 << 20
TS_KEYS = ("ts", "time", "timestamp", "date", "datetime", "deployed_at", "created_at", "at", "when", "start")
WHAT_KEYS = ("what", "component", "service", "package", "name", "target", "model", "app", "application")
VERSION_KEYS = ("version", "new_version", "to_version", "to", "image", "tag", "revision", "release")
FROM_KEYS = ("from_version", "old_version", "previous_version", "from", "previous")
WHO_KEYS = ("who", "user", "author", "by", "actor", "owner", "requested_by")
ACTION_KEYS = ("action", "type", "kind", "change_type", "event")
HOST_KEYS = ("host", "node", "hostname", "nodes", "hosts")
NOTE_KEYS = ("description", "message", "note", "notes", "summary", "comment", "details")


def parse_records(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """Deploy / config records, CSV or JSON: one change per record that names what changed."""
    data = stream.read(MAX_RECORDS_BYTES + 1)
    ctx.lines_read = data.count(b"\n") + 1
    if len(data) > MAX_RECORDS_BYTES:
        yield Skipped(None, f"change records larger than {MAX_RECORDS_BYTES >> 20} MiB; only the start was read")
        data = data[:MAX_RECORDS_BYTES]
    text = decoded(data).lstrip("\ufeff")
    stripped = text.lstrip()
    records: list[tuple[int | None, dict[str, Any]]] = []
    if stripped.startswith(("[", "{")):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
            for n, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError:
                    yield Skipped(n, "not a JSON record")
                    continue
                if isinstance(item, dict):
                    records.append((n, item))
        if doc is not None:
            items = doc if isinstance(doc, list) else next(
                (v for v in doc.values() if isinstance(v, list)), [doc]) if isinstance(doc, dict) else []
            records.extend((None, item) for item in items if isinstance(item, dict))
    else:
        dialect = "excel-tab" if "\t" in text.split("\n", 1)[0] else "excel"
        reader = csv.DictReader(io.StringIO(text), dialect=dialect)
        try:
            for row in reader:
                records.append((reader.line_num, {(k or "").strip(): v for k, v in row.items()}))
        except csv.Error as exc:
            yield Skipped(reader.line_num, f"CSV error: {exc}")
    for n, record in records:
        try:
            row = _record_event(record, n)
        except ITEM_ERRORS as exc:  # one record of the wrong shape costs no other
            yield Skipped(n, f"unreadable change record ({type(exc).__name__})")
            continue
        if row is None:
            yield Skipped(n, "change record without 'what'")
        else:
            yield row


def _field(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    lowered = {str(k).strip().lower(): v for k, v in record.items()}
    for key in keys:
        value = lowered.get(key)
        if value not in (None, ""):
            return value
    return None


def _record_event(record: dict[str, Any], n: int | None) -> Event | None:
    what = _field(record, WHAT_KEYS)
    if what is None:
        return None
    raw_ts = _field(record, TS_KEYS)
    ts, origin = parse_record_time(raw_ts)
    version = _field(record, VERSION_KEYS)
    host = _field(record, HOST_KEYS)
    if isinstance(host, list):
        host = ",".join(str(h) for h in host)
    action = str(_field(record, ACTION_KEYS) or "deploy")
    layer = layer_for(f"{what} {action}") if names_gpu_stack(str(what)) else "business"
    note = _field(record, NOTE_KEYS)
    return change_event(what=str(what), version=None if version is None else str(version),
                        from_version=_str(_field(record, FROM_KEYS)), action=action, who=_str(_field(record, WHO_KEYS)),
                        via="records", ts=ts, ts_origin=origin, ts_raw=None if raw_ts is None else str(raw_ts),
                        line=n, host=str(host) if host and "," not in str(host) else None, layer=layer,
                        note=None if note is None else str(note)[:300], approx=origin != "iso")


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_record_time(value: Any) -> tuple[datetime | None, str]:
    """ISO 8601 (with or without zone), ``YYYY-MM-DD HH:MM[:SS]`` or epoch seconds/milliseconds."""
    if value is None:
        return None, "none"
    if isinstance(value, (int, float)) or (isinstance(value, str) and re.fullmatch(r"\d{9,13}(\.\d+)?", value.strip())):
        try:
            seconds = float(value)
            if seconds > 1e11:
                seconds /= 1000.0
            return datetime.fromtimestamp(seconds, tz=timezone.utc), "iso"
        except (OverflowError, ValueError, OSError):
            return None, "none"
    text = str(value).strip().replace("Z", "+00:00").replace("z", "+00:00")
    text = re.sub(r"^(\d{4}-\d\d-\d\d)\s+", r"\1T", text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None, "none"
    if when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc), "local_as_utc"
    return to_utc(when), "iso"
