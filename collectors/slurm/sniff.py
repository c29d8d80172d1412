"""Which Slurm output a file's head is: the JSON outputs, scontrol records, a table by its header, a daemon
log by its line prefixes and words."""

from __future__ import annotations

import re

from collectors.framework.lazy_re import lazy_regex
from collectors.slurm.daemon_logs import log_lines
from collectors.slurm.tables import ALIASES, header_columns
from collectors.slurm.text import unwrap


def sniff(name: str, head: str) -> dict[str, int]:
    text = head.lstrip()
    if not text:
        return {}
    if text.startswith("{"):
        if re.search(r'"jobs"\s*:', head) and re.search(r'"job_id"|"Slurm"|"slurm"', head):
            return {"sacct_json": 90}
        if re.search(r'"nodes"\s*:', head) and re.search(r'"state_flags"|"reason_set_by_user"|"Slurm"', head):
            return {"slurm_json": 85}
        return {}
    lines = [unwrap(line).strip() if '"' in line else line.strip() for line in head.splitlines()[:200]]
    lines = [line for line in lines if line]
    if not lines:
        return {}
    first = lines[0]
    if first.startswith("Configuration data as of") or (re.search(r"^SLURM_VERSION\s+=", head, re.M)
                                                        and re.search(r"^Slurmctld\w*\s+=", head, re.M)):
        return {"slurm_config": 90}
    scores: dict[str, int] = {}
    body = "\n".join(lines)
    has_job_state = "JobState=" in body and _JOB_STATE.search(body)
    if has_job_state and (any(re.match(r"^JobId=\d", line) for line in lines[:20]) or _JOB_TIMES.search(body)):
        scores["scontrol_job"] = 90
    if "NodeName=" in body and any(re.match(r"^NodeName=\S+", line) for line in lines[:20]) \
            and re.search(r"\bState=", head):
        scores["scontrol_node"] = 90
    for line in lines[:40] if _HEADER_KEY.search("\n" + "\n".join(lines[:40]).lower()) else ():
        header = header_columns(line)
        if header:
            cols = header[0]
            if "jobid" in cols:
                # only sacct rules its header with dashes, and only it has accounting columns
                ruled = re.fullmatch(r"-+(?: +-+)+", lines[min(lines.index(line) + 1, len(lines) - 1)])
                sacct = "|" in line or ruled or bool(_SACCT_ONLY & set(cols))
                scores.setdefault("sacct" if sacct else "squeue", 85)
            elif "start" in cols and "nodelist" in cols and "|" in line:
                scores.setdefault("sacctmgr_event", 85)
            else:
                scores.setdefault("sinfo", 85)
            break
    slurm_words = sum(1 for line in lines if _SLURM_WORDS.search(line)) \
        if any(word in body for word in _SLURM_WORD_ANCHORS) else 0
    if (slurm_words or "slurm" in head[:4000].lower()) and log_lines(lines) >= max(1, len(lines) // 2):
        scores["slurm_log"] = max(scores.get("slurm_log", 0), 85)
    elif slurm_words:
        scores["slurm_log"] = 80 if slurm_words * 3 >= len(lines) else 40
    return scores


_JOB_STATE = lazy_regex(r"\bJobState=\w+")
"""Searched in a head's lines joined by newlines (after a plain substring test, far cheaper than a pattern
that starts with \\b): no match can span two lines, so one search is the any() over lines."""
_JOB_TIMES = lazy_regex(r"\b(?:ExitCode|SubmitTime|StartTime)=")
_SLURM_WORDS = lazy_regex(r"JobId=|slurmstepd|slurm_script|srun: |_job_complete|update_node|\bsched: |"
                          r"\*\*\* (?:JOB|STEP) \d|oom[-_]kill event|^State: [A-Z_]+ \(exit code")
_SLURM_WORD_ANCHORS = ("JobId=", "slurmstepd", "slurm_script", "srun: ", "_job_complete", "update_node", "sched: ",
                       "*** JOB ", "*** STEP ", "kill event", "State: ")
"""A text in every _SLURM_WORDS match: a head with none of them has no slurm words, found without a search per line."""
_SACCT_ONLY = {"exitcode", "alloccpus", "maxrss", "totalcpu", "jobidraw", "derivedexitcode", "reqmem", "alloctres",
               "maxvmsize", "averss", "ncpus", "elapsedraw"}
_HEADER_CELLS = sorted({*(k for k, v in ALIASES.items() if v in ("jobid", "nodelist")), "jobid", "nodelist"})
_HEADER_KEY = lazy_regex(r"[\s|](?:" + "|".join(map(re.escape, _HEADER_CELLS)) + r")(?![^\s|])")
"""A column header_columns needs (one named jobid or nodelist), as a whole cell of the lower-cased lines, each
after a newline: lines without one are not tried as a table header."""
