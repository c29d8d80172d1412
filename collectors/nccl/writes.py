"""A failed write in a rank's log (``collectors.storage.write_failures.write_failure`` reads the line): a
checkpoint's when torch's serializer printed it or the lines before it show a save in progress."""

from __future__ import annotations

import re

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist import Finding
from collectors.storage.write_failures import write_failure

_CKPT_CONTEXT = lazy_regex(rb"torch\.save|save_checkpoint|serialization\.py|checkpoint|ckpt|safetensors|state_dict|"
                           rb"save_pretrained|dcp\.save|\.pth?\b", re.I)
"""A write error with one of these in the lines before it (a ``torch.save`` traceback, ``Saving
checkpoint to …``) is a checkpoint write failure."""
_CKPT_LOOKBACK = 40


def write_finding(rest: str, block: bytes, line_start: int) -> Finding | None:
    """A failed write in a rank's log; a checkpoint's when the line is torch's serializer or the lines
    before it show a save in progress (the traceback through torch.save, a ``Saving checkpoint`` line)."""
    failure = write_failure(rest)
    if failure is None:
        return None
    before = _lines_before(block, line_start, _CKPT_LOOKBACK)
    saving = failure["checkpoint_api"] or bool(_CKPT_CONTEXT.search(rest.encode("utf-8", "replace"))) or any(
        _CKPT_CONTEXT.search(line) for line in before)
    attrs = {key: value for key, value in failure.items() if key != "checkpoint_api" and value is not None}
    errno = f" ({failure['errno']})" if failure["errno"] else ""
    what = "checkpoint write failed" if saving else "storage error"
    return Finding("checkpoint_write_failed" if saving else "storage_error", "error", attrs,
                   layer="network_storage", message=f"{what}{errno}: {failure['error']}")


def _lines_before(data: bytes, start: int, count: int) -> list[bytes]:
    """Up to ``count`` lines of ``data`` before the line that starts at ``start``."""
    if start <= 0:
        return []
    cut = start - 1
    for _ in range(count):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    return data[cut + 1:start - 1].split(b"\n")
