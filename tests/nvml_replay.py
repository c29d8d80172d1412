"""pynvml answering from recorded real NVML values (tests/data/nvml/replay_*.json): what the NVML
collector's tests, the recorder's tests and tests/perf/record_bench.py replay on machines without a GPU."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

DATA = Path(__file__).resolve().parent / "data" / "nvml"
ERROR_VALUES = {cls.__name__.removeprefix("NVMLError_"): value
                for value, cls in pynvml.NVMLError._valClassMapping.items()}


def nvml_error(name: str) -> pynvml.NVMLError:
    """The exception real pynvml raises for that NVML return code (NVMLError_NotSupported, ...)."""
    return pynvml.NVMLError(ERROR_VALUES[name])


class FakeHandle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """A pynvml stand-in replaying a call-level recording (tests/data/nvml/replay_*.json).

    Keys are NVML function names, optionally with their non-handle arguments (``nvmlDeviceGetClockInfo(1)``);
    ``{"error": NAME}`` raises the real NVMLError subclass; ``{"seq": [...]}`` answers call by call;
    dicts come back as structs. A call the recording does not know answers NotSupported, as NVML does
    for a field the GPU lacks. Constants and error classes are the real pynvml ones."""

    def __init__(self, recording: dict[str, Any], hang_on: str | None = None) -> None:
        self.rec = recording
        self.hang_on = hang_on
        self.calls: Counter[str] = Counter()
        self.waits = 0
        self.handles = [FakeHandle(i) for i in range(len(recording["devices"]))]

    def __getattr__(self, name: str) -> Any:
        if name in self.rec.get("absent", ()):
            raise AttributeError(name)
        if not name.startswith("nvml"):
            return getattr(pynvml, name)
        return lambda *args: self._call(name, *args)

    def _maybe_hang(self, name: str) -> None:
        if name == self.hang_on:
            time.sleep(3600)  # a GPU that fell off the bus stalls NVML inside the driver like this

    def nvmlInit(self) -> None:
        self._maybe_hang("nvmlInit")

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.rec["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._maybe_hang("nvmlDeviceGetHandleByIndex")
        return self.handles[index]

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types: int, event_set: object) -> None:
        return None

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        self.waits += 1
        for event in self.rec.get("events", []):
            if event["on_wait"] == self.waits:
                return SimpleNamespace(device=self.handles[event["device"]], eventType=event["eventType"],
                                       eventData=event["eventData"])
        time.sleep(timeout_ms / 1000)
        raise nvml_error("Timeout")

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        links = self.rec["devices"][handle.index].get("nvlinks")
        if links is None:
            return self._call("nvmlDeviceGetNvLinkState", handle, link)
        if link >= links["count"]:
            raise nvml_error("InvalidArgument")
        return 1 if link in links["active"] else 0

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeHandle, link: int, counter: int) -> int:
        links = self.rec["devices"][handle.index].get("nvlinks") or {}
        if "errors" not in links:
            raise nvml_error("NotSupported")
        return links["errors"].get(str(link), {}).get(str(counter), 0)

    def _call(self, name: str, *args: Any) -> Any:
        self._maybe_hang(name)
        if args and isinstance(args[0], FakeHandle):
            table, rest = self.rec["devices"][args[0].index], args[1:]
        else:
            table, rest = self.rec.get("system", {}), args
        keyed = f"{name}({','.join(map(str, rest))})"
        key = keyed if keyed in table else name
        self.calls[key] += 1
        if key not in table:
            raise nvml_error("NotSupported")
        value = table[key]
        if isinstance(value, dict) and "error" in value:
            raise nvml_error(value["error"])
        if isinstance(value, dict) and "seq" in value:
            value = value["seq"][min(self.calls[key], len(value["seq"])) - 1]
        if isinstance(value, dict):
            return SimpleNamespace(**value)
        if isinstance(value, list):
            return [SimpleNamespace(**v) if isinstance(v, dict) else v for v in value]
        return value


def recording(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())
