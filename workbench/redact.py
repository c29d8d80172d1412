"""Secret scrubbing applied to live-captured evidence before it is stored.

Values of variables whose names say token/secret/password/key/credential, bearer tokens and
password-like command-line options are replaced; the names stay so responders still see that
the variable was set.
"""

from __future__ import annotations

import re

MASK = "***REDACTED***"

SECRET_NAME = re.compile(r"(?i)(token|secret|passw(or)?d|passwd|api[_-]?key|access[_-]?key|private[_-]?key"
                         r"|(^|_)key($|_)|credential|auth)")

_ENV_ASSIGN = re.compile(
    rb"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|KEY|CREDENTIALS?|AUTH)"
    rb"[A-Za-z0-9_]*)(?P<eq>=)(?P<value>[^\s\x00'\"]+)", re.IGNORECASE)
_BEARER = re.compile(rb"(?i)(?P<lead>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_OPTION = re.compile(
    rb"(?i)(?P<lead>--?(?:[a-z0-9-]*-)?(?:token|password|passwd|secret|api-key|key)(?:=|\s+))"
    rb"(?P<value>[^\s\x00'\"]+)")
_URL_CRED = re.compile(rb"(?P<lead>[a-z][a-z0-9+.-]*://[^/\s:@]+:)(?P<value>[^@\s/]+)(?=@)")


def redact_bytes(data: bytes) -> tuple[bytes, int]:
    """Scrub one block of text; returns the new bytes and how many values were masked."""
    count = 0

    def mask(match: re.Match[bytes]) -> bytes:
        nonlocal count
        if match.group("value") == MASK.encode():
            return match.group(0)
        count += 1
        lead = match.group(0)[: match.start("value") - match.start(0)]
        return lead + MASK.encode()

    for pattern in (_ENV_ASSIGN, _BEARER, _OPTION, _URL_CRED):
        data = pattern.sub(mask, data)
    return data, count


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of an environment with secret-named values masked, and secrets inside values too."""
    out = {}
    for name, value in env.items():
        if SECRET_NAME.search(name):
            out[name] = MASK
        else:
            out[name] = redact_bytes(value.encode("utf-8", "replace"))[0].decode("utf-8", "replace")
    return out
