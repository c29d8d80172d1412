"""The thin pynvml adapter: every NVML call of a capture made safe, an error becoming a null value plus a
reason, so one unsupported field (ECC on a GeForce, row remapping before Ampere) never costs the rest.
``pynvml`` is imported only when asked for (``load_nvml``): importing collectors stays fast on a bare node."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def load_nvml() -> ModuleType:
    """The pynvml module; deferred so that importing collectors stays fast on a bare node."""
    import pynvml

    return pynvml


class NvmlAdapter:
    """Every NVML call of the capture, made safe: errors become (None, reason in ``sink``).

    The wrapped module is injectable, so tests replay recorded values through a fake pynvml."""

    def __init__(self, nvml: ModuleType | Any) -> None:
        self.nvml = nvml

    def const(self, name: str, default: Any = None) -> Any:
        return getattr(self.nvml, name, default)

    def init(self) -> str | None:
        """None when NVML is up, else the coverage reason."""
        try:
            self.nvml.nvmlInit()
        except Exception as exc:
            name = error_name(exc)
            if name == "LibraryNotFound":
                return "unavailable: NVML library not found"
            if name == "DriverNotLoaded":
                return "unavailable: NVIDIA driver not loaded"
            if name == "NoPermission":
                return "denied: no permission to initialize NVML"
            return f"unavailable: nvmlInit failed: {name}"
        return None

    def shutdown(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # shutting down after a failure must not hide what was recorded
            return

    def raw(self, sink: dict[str, str], field: str, fn: str, *args: Any) -> Any:
        """Call ``fn``; on any error record why under ``field`` and return None."""
        func = getattr(self.nvml, fn, None)
        if func is None:
            sink[field] = "FunctionNotFound"
            return None
        try:
            return func(*args)
        except Exception as exc:
            sink[field] = error_name(exc)
            return None

    def call(self, sink: dict[str, str], field: str, fn: str, *args: Any) -> Any:
        """Like ``raw`` with the result turned into plain JSON values (structs become dicts)."""
        return plain(self.raw(sink, field, fn, *args))


def error_name(exc: BaseException) -> str:
    """NVMLError_NotSupported -> 'NotSupported'; anything else -> its type and text."""
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    if name == "NVMLError":
        return str(exc) or name
    return f"{name}: {exc}"[:200]


def plain(value: Any) -> Any:
    """NVML return values (ctypes structs, bytes, tuples) as JSON-ready values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: plain(getattr(value, name, None)) for name, *_ in fields}
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)
