"""How a line is framed, apart from what it says: one grammar of wrappers and time prefixes.

lnav's model: a shared ``timestamp-format`` list and format files keep "when and where was this
written" out of "what does it mean". Here every text collector, the sniffers and the signature
catalog ask this module for a line's frame and get back the message body plus what the wrappers
said (time, host, rank, stream), so a known message is recognised in whatever wrapper it arrives:

- quoting: Markdown ``> `` quotes and code fences (what people paste into issues);
- container framing: Kubernetes CRI (``2025-01-02T03:04:05.123456789Z stderr F ...``, ``P`` partial
  lines joined), docker json-file (``{"log": "...", "stream": ..., "time": ...}``), ``kubectl logs
  --timestamps`` (RFC 3339 then a space);
- system logs: RFC 3164 syslog and journalctl short/short-precise (``Mar  6 09:55:01 host prog[pid]: ``),
  RFC 5424, ISO syslog and journalctl short-iso(-precise), rsyslog's ``#012`` escaped newlines (split
  into lines), ``<6>`` priorities and ``dmesg -x`` facility/level;
- kernel rings: dmesg raw seconds ``[  123.456]``, ``dmesg -T`` ctime, ``dmesg -H``/``--reltime``
  (``[May19 19:57]`` then ``[  +0.000127]`` deltas, accumulated), ``dmesg --time-format iso``;
- launchers: pdsh/clush ``host: ``, ``srun --label`` ``3: ``, torchrun ``[rank3]:``/``[default3]:``,
  mpirun ``[1,3]<stderr>:``, NCCL's ``host:pid:tid [dev]``;
- program logs: glog ``I0306 09:55:01.123456 1234 file.cc:12]``, Python logging
  (``2025-03-06 09:55:01,123 - name - LEVEL - `` and ``[2025-03-06 09:55:01,123] [INFO]``), vLLM
  (``(EngineCore_DP0 pid=1) ERROR 03-06 09:55:01 [file.py:12]``), SGLang ``[2025-03-06 09:55:01 TP0]``,
  and ISO-8601 with ``T`` or a space, with or without a fraction and a zone.

Wrappers are peeled outermost first, repeatedly. The body left is always a suffix of the line
(except a docker JSON string, which is decoded, and ``#012`` pieces). A line without a time keeps
``ts`` None in :func:`peel`; :func:`frame_lines` then dates it from its dated neighbours and marks
it approximate. No line is ever dropped.

The modules: times.py (ISO-8601 in and out), wrappers.py (one line's frame: :func:`peel`), streams.py
(:func:`frame_lines`) and unframe.py (:func:`unframed_lines`).
"""

from __future__ import annotations

from collectors.framework.framing.streams import frame_lines
from collectors.framework.framing.times import ISO, format_iso, iso_time, parse_iso
from collectors.framework.framing.unframe import unframed_lines
from collectors.framework.framing.wrappers import LEVELS, Framed, peel

__all__ = ["ISO", "LEVELS", "Framed", "format_iso", "frame_lines", "iso_time", "parse_iso", "peel", "unframed_lines"]
"""What the collectors, the signature matcher and the registry import from here (the names they used when this
was one module)."""
