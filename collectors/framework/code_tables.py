"""Error-code tables (collectors/catalog/<name>.yaml, e.g. cuda_errors.yaml): one entry per code of
each API, so one signature of collectors/catalog/signatures/ knows every error of a library by the
name, the message or the number it prints, instead of one signature per error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from collectors.base import SEVERITIES
from collectors.catalog.parsed import parsed_yaml

CATALOG = Path(__file__).resolve().parents[1] / "catalog"


class CodeTableError(ValueError):
    """A code table is malformed or missing: named with the table and the entry."""


@dataclass(frozen=True)
class CodeEntry:
    """One error code of a code table: its name, number, printed message and what it points to."""

    api: str
    name: str
    code: int
    message: str
    severity: str
    cause: str | None
    attrs: dict[str, Any]
    meaning: str


class CodeTable:
    """An error-code table (collectors/catalog/<name>.yaml, e.g. cuda_errors.yaml): one entry per code
    of each api, so one signature knows every error of a library by its name, its message or its code
    instead of one signature per error. A line is resolved by the name it prints, else by the message
    its ``error`` group starts with, else by its ``code``; where runtime and driver share a message or
    a number, the api whose ``hint`` the line matches (a driver call) wins, else the first api."""

    def __init__(self, name: str, doc: Any) -> None:
        apis = doc.get("apis") if isinstance(doc, dict) else None
        if not isinstance(apis, dict) or not apis:
            raise CodeTableError(f"{name}.yaml: a top-level 'apis' mapping is required")
        self.name = name
        self.apis = list(apis)
        self.hints: dict[str, re.Pattern[str]] = {}
        self.by_name: dict[str, CodeEntry] = {}
        self.by_short: dict[str, CodeEntry] = {}
        self.by_code: dict[tuple[str, int], CodeEntry] = {}
        self.by_message: dict[str, dict[str, CodeEntry]] = {}
        for api, section in apis.items():
            if not isinstance(section, dict) or not isinstance(section.get("errors"), list):
                raise CodeTableError(f"{name}.yaml: api {api!r} needs an 'errors' list")
            if section.get("hint"):
                self.hints[api] = re.compile(section["hint"])
            for i, raw in enumerate(section["errors"]):
                entry = self._entry(api, raw, f"{name}.yaml {api} entry {i + 1}")
                for alias in [entry.name, *(raw.get("names") or ())]:
                    self.by_name.setdefault(alias, entry)
                    self.by_short.setdefault(_short_name(alias), entry)
                self.by_code.setdefault((api, entry.code), entry)
                for text in [entry.message, *(raw.get("aliases") or ())]:  # "toolchain." is also printed bare
                    self.by_message.setdefault(text.lower().rstrip("."), {}).setdefault(api, entry)
        self.by_first_word: dict[str, list[str]] = {}
        """a message's first word -> the messages that start with it, longest first (one dict lookup
        and a few startswith instead of one regex alternation of every message: ~1 us, not ~50)"""
        for text in sorted(self.by_message, key=len, reverse=True):
            self.by_first_word.setdefault(text.split(" ", 1)[0], []).append(text)

    @staticmethod
    def _entry(api: str, raw: Any, where: str) -> CodeEntry:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("code"), int) \
                or not isinstance(raw.get("message"), str) or raw.get("severity") not in SEVERITIES:
            raise CodeTableError(f"{where}: name, code (a number), message and severity ({', '.join(SEVERITIES)}) "
                                 "are required")
        return CodeEntry(api=api, name=raw["name"], code=raw["code"], message=raw["message"],
                         severity=raw["severity"], cause=raw.get("cause"), attrs=dict(raw.get("attrs") or {}),
                         meaning=str(raw.get("meaning") or ""))

    def resolve(self, attrs: dict[str, Any], body: str) -> CodeEntry | None:
        """The entry a match names: by its ``name`` attr, else the message its ``error`` attr starts
        with, else its ``code`` attr; None when the line names no code of the table."""
        name = attrs.get("name")
        if isinstance(name, str) and (entry := self.by_name.get(name) or self.by_short.get(_short_name(name))):
            return entry
        error = attrs.get("error")
        if isinstance(error, str) and (by_api := self.message(error)):
            return by_api.get(self._api(body)) if len(by_api) > 1 else next(iter(by_api.values()))
        code = attrs.get("code")
        return self.by_code.get((self._api(body), code)) if isinstance(code, int) else None

    def causes(self) -> set[str]:
        """Every cause an entry of the table points to."""
        return {e.cause for e in self.by_name.values() if e.cause}

    def message(self, text: str) -> dict[str, CodeEntry] | None:
        """The entries (by api) whose message ``text`` starts with, as a whole word or phrase."""
        low = text.strip().lower()
        for known in self.by_first_word.get(low.split(" ", 1)[0], ()):
            if low.startswith(known) and not low[len(known):len(known) + 1].isalpha():
                return self.by_message[known]
        return None

    def _api(self, body: str) -> str:
        return next((api for api, hint in self.hints.items() if hint.search(body)), self.apis[0])


def _short_name(name: str) -> str:
    """``CUDA_ERROR_LAUNCH_FAILED``, ``ERROR_LAUNCH_FAILED`` -> ``LAUNCH_FAILED`` (Julia drops the prefix)."""
    return re.sub(r"^(?:CUDA_ERROR_|ERROR_|cudaError)", "", name)


@cache
def code_table(name: str) -> CodeTable:
    """The code table collectors/catalog/<name>.yaml, read once per process."""
    path = CATALOG / f"{name}.yaml"
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not path.is_file():
        raise CodeTableError(f"table {name!r}: no collectors/catalog/{name}.yaml")
    return CodeTable(name, parsed_yaml([path], lambda docs: CodeTable(name, docs[0]))[0])


