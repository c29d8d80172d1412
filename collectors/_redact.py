"""Secret scrubbing applied to live-captured evidence before it is stored.

A value is masked when its name says it is a secret (``HF_TOKEN=``, ``--password x``,
``"apiKey": "..."``, ``password: ...``, a Kubernetes env entry named ``WANDB_API_KEY``), when it
follows ``Authorization:``/``Bearer``, sits in a URL's ``user:password@``, is a PEM private key, or
has the shape of a well-known token (``ghp_…``, ``hf_…``, ``AKIA…``, ``sk-…``, a JWT ``eyJ….eyJ….…``).
The names stay so responders still see that the variable was set.

Names are judged by their last word, not by a substring: ``NCCL_IB_PKEY``, ``MAX_TOKENS``,
``TOKENIZERS_PARALLELISM``, ``SSH_AUTH_SOCK``, ``PWD`` and ``-p 8080`` are settings a responder
needs, and stay visible.
"""

from __future__ import annotations

import re

MASK = "***REDACTED***"

SECRET_WORDS = frozenset({
    "token", "secret", "password", "passwd", "passphrase", "pass", "pwd", "credential", "credentials", "auth",
    "authorization", "apikey", "secretkey", "accesskey", "privatekey", "sessiontoken"})
"""A name whose last word is one of these holds a secret (``PWD`` alone is the working directory)."""

KEY_QUALIFIERS = frozenset({
    "api", "secret", "access", "private", "auth", "encryption", "signing", "master", "client", "account",
    "license", "ssh", "session", "service", "app", "hmac", "deploy", "admin", "storage", "subscription", "sas",
    "webhook", "crypt", "encrypt"})
"""``X_KEY`` is a secret for these X (``API_KEY``, ``SECRET_ACCESS_KEY``); ``NCCL_IB_PKEY``, ``HOTKEY`` and a bare
``key`` (``sort --key=2``, ``key=0x1234`` in a driver message) are not."""

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_HINT = rb"[A-Za-z0-9_.-]*(?i:token|secret|pass|pwd|key|auth|credential)[A-Za-z0-9_.-]*"
"""A name that may be a secret's (decided by :func:`secret_name`); keeps the regexes from calling back
for every ``pid=1234``."""


def secret_name(name: str) -> bool:
    """True when a variable, option or field called ``name`` holds a secret."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words:
        return False
    last = words[-1]
    if last == "pwd" and len(words) == 1:
        return False
    if last in SECRET_WORDS:
        return True
    return last == "key" and len(words) > 1 and words[-2] in KEY_QUALIFIERS


_VALUE = rb"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\x00'\",;&|)]+)"

# The lookahead for "=" and the leading literal "-" let the engine skip most positions quickly (4x).
_ASSIGN = re.compile(rb"(?<![\w.-])(?=[\w.-]*=)(?P<name>" + _HINT + rb")=(?P<value>" + _VALUE + rb")")
_OPTION = re.compile(rb"(?P<lead>-(?<![\w-]-)-?(?P<name>" + _HINT + rb")(?:=|[ \t]+(?!-)))(?P<value>" + _VALUE + rb")")
_JSON_PAIR = re.compile(rb"\"(?P<name>" + _HINT + rb")\"\s*:\s*\"(?P<value>(?:[^\"\\\n]|\\.)+)\"")
_JSON_ENV = re.compile(rb"\"name\"\s*:\s*\"(?P<name>" + _HINT + rb")\"\s*,\s*\"value\"\s*:\s*"
                       rb"\"(?P<value>(?:[^\"\\\n]|\\.)+)\"")
_YAML_ENV = re.compile(rb"(?m)^[ \t]*-[ \t]+name:[ \t]*[\"']?(?P<name>" + _HINT + rb")[\"']?[ \t]*\r?\n"
                       rb"[ \t]+value:[ \t]*(?P<value>[^\r\n]+)")
_YAML_PAIR = re.compile(rb"(?m)^[ \t]*(?:-[ \t]+)?(?P<name>" + _HINT + rb")[ \t]*:[ \t]+(?P<value>[^\s#][^\r\n]*)")
_HEADER = re.compile(rb"(?i)(?P<lead>\b(?:proxy-)?authorization[ \t]*[:=][ \t]*"
                     rb"(?:(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+)?)(?P<value>[^\s'\"]+)"
                     rb"|(?P<lead2>\b(?:x-api-key|api-key|x-auth-token|private-token|x-vault-token)[ \t]*:[ \t]*)"
                     rb"(?P<value2>[^\s'\"]+)")
_BEARER = re.compile(rb"(?i)(?P<lead>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_URL_CRED = re.compile(rb"(?P<lead>[a-z][a-z0-9+.-]*://[^/\s:@]+:)(?P<value>[^@\s/]+)(?=@)")
_PEM = re.compile(rb"(?P<lead>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\r?\n)(?P<value>[\s\S]+?)"
                  rb"(?=\r?\n-----END [A-Z0-9 ]*PRIVATE KEY-----)")
_TOKEN_SHAPE = re.compile(
    rb"\b(?P<value>gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_-]{20,}"
    rb"|xox[abprs]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{30,}|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"
    rb"|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
    rb"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})\b")

_NAMED = (_JSON_ENV, _YAML_ENV, _JSON_PAIR, _YAML_PAIR, _OPTION, _ASSIGN)
"""Patterns led by a name, most specific first: once a value is masked, the broader patterns see the
mask and leave it. They only run near a line that holds a hint word (see :func:`_hinted_spans`)."""
_HINT_WORDS = (b"token", b"secret", b"pass", b"pwd", b"key", b"auth", b"credential")
_SPAN_LINES = 3
"""A Kubernetes env entry puts the value up to two lines below its name."""
_GATED = ((_PEM, (b"PRIVATE KEY-----",)), (_URL_CRED, (b"://",)),
          (_TOKEN_SHAPE, (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_", b"glpat-", b"xox", b"hf_",
                          b"sk-", b"AKIA", b"ASIA", b"AIza", b"eyJ")))
"""Patterns run over the whole block, each only when one of its literals occurs in it at all."""
_GATED_ANY_CASE = ((_HEADER, (b"authorization", b"api-key", b"auth-token", b"private-token", b"vault-token")),
                   (_BEARER, (b"bearer",)))
"""The same for case-insensitive literals, looked up in the lowered block; these run first, before the
name-led patterns, so that ``Authorization: Bearer x`` keeps its scheme word."""


def redact_bytes(data: bytes) -> tuple[bytes, int]:
    """Scrub one block of text; returns the new bytes and how many values were masked.

    A plain regex pass over every pattern runs at ~5 MB/s; most captured text (kernel and NCCL
    logs) holds no secret-looking name at all, so the name-led patterns run only on the few lines
    near a hint word and the others only when their literal occurs: ~100 MB/s on such logs."""
    count = 0
    mask_bytes = MASK.encode()

    def mask(match: re.Match[bytes]) -> bytes:
        nonlocal count
        group = "value" if match.group("value") is not None else "value2"
        value = match.group(group)
        if mask_bytes in value:
            return match.group(0)
        names = match.re.groupindex
        if "name" in names and not secret_name(match.group("name").decode("ascii", "replace")):
            if match.re is _ASSIGN:  # ``--export=ALL,HF_TOKEN=x``: a secret may sit inside the value
                inner, n = redact_bytes(value)
                count += n
                return match.group(0)[: match.start(group) - match.start(0)] + inner
            return match.group(0)
        count += 1
        quote = value[:1] if value[:1] in (b'"', b"'") and value[-1:] == value[:1] and len(value) > 1 else b""
        whole, start, end = match.group(0), match.start(group) - match.start(0), match.end(group) - match.start(0)
        return whole[:start] + quote + mask_bytes + quote + whole[end:]

    low = data.lower()
    for pattern, literals in _GATED_ANY_CASE:
        if any(lit in low for lit in literals):
            data = pattern.sub(mask, data)
    spans = _hinted_spans(data.lower() if count else low)
    if spans:
        pieces, pos = [], 0
        for start, end in spans:
            piece = data[start:end]
            for pattern in _NAMED:
                piece = pattern.sub(mask, piece)
            pieces += [data[pos:start], piece]
            pos = end
        pieces.append(data[pos:])
        data = b"".join(pieces)
    for pattern, literals in _GATED:
        if any(lit in data for lit in literals):
            data = pattern.sub(mask, data)
    return data, count


def _hinted_spans(low: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the lowered block, whole lines, from each line holding a hint word to
    ``_SPAN_LINES`` lines below it."""
    starts: list[int] = []
    for word in _HINT_WORDS:
        at = low.find(word)
        while at != -1:
            line = low.rfind(b"\n", 0, at) + 1
            starts.append(line)
            nxt = low.find(b"\n", at)
            at = low.find(word, nxt) if nxt != -1 else -1
    spans: list[tuple[int, int]] = []
    for line in sorted(set(starts)):
        end = line
        for _ in range(_SPAN_LINES + 1):
            end = low.find(b"\n", end) + 1 or len(low)
            if end == len(low):
                break
        if spans and line <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((line, end))
    return spans


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of an environment with secret-named values masked, and secrets inside values too."""
    out = {}
    for name, value in env.items():
        if secret_name(name):
            out[name] = MASK
        else:
            out[name] = redact_bytes(value.encode("utf-8", "replace"))[0].decode("utf-8", "replace")
    return out
