"""Secret scrubbing applied to live-captured evidence before it is stored.

Every shape of secret this module masks is one row of :data:`RULES` (docs/data-flow.md lists them):
a value whose name says it is a secret (``HF_TOKEN=``, ``PGPASSWORD=``, ``--password x``,
``"apiKey": "..."``, ``password: ...``, ``aws_secret_access_key = ...``, a Kubernetes env entry named
``WANDB_API_KEY``), the password option of the programs that take one on the command line
(``mysql -pX``, ``sshpass -p X``, ``curl -u user:X``, ``redis-cli -a X``, ``ipmitool -P X``, ...),
HTTP credential headers, ``user:password@`` in a URL, signed-URL and webhook secrets, PEM private
keys, and well-known token shapes (``ghp_…``, ``xoxb-…``, ``hf_…``, ``sk-…``, ``AKIA…``, a JWT).
The names stay so responders still see that the variable was set.

Names are judged by their last word, not by a substring: ``NCCL_IB_PKEY``, ``MAX_TOKENS``,
``TOKENIZERS_PARALLELISM``, ``SSH_AUTH_SOCK``, ``PWD`` and ``-p 8080`` are settings a responder
needs, and stay visible. A program's password option is masked only on that program's command
line: ``docker run -p 8080:80``, ``ssh -p 2222``, ``perfquery -P 1`` and ``mysql -p`` (which
prompts) stay as they are.

An unquoted value ends at whitespace, a NUL (``/proc/PID/cmdline``), a quote, ``;``, ``&``, ``|``
or ``)``, and for a ``NAME=value`` pair also at ``,`` (``mount -o user=u,password=p,uid=0``); a
quoted value ends at its closing quote. Lines of a config file are known at a line's start, also
inside a JSON string (a Docker ``json-file`` record); JSON inside JSON strings is read too.

Redaction is idempotent, keeps JSON valid, and runs in linear time on any input: a hostile line must
not make a backtracking pattern overrun the collector's deadline (tests/reliability/test_secrets.py).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from collectors.framework.lazy_re import lazy_regex

MASK = "***REDACTED***"

SECRET_WORDS = frozenset({
    "token", "secret", "password", "passwd", "passphrase", "pass", "pwd", "credential", "credentials", "auth",
    "authorization", "apikey", "secretkey", "accesskey", "privatekey", "sessiontoken", "sshpass"})
"""A name whose last word is one of these holds a secret (``PWD`` alone is the working directory)."""

SECRET_SUFFIXES = ("password", "passwd", "passphrase", "secret", "token", "apikey")
"""A last word that ends in one of these is a secret too: ``PGPASSWORD``, ``DBPASSWD``, ``AUTHTOKEN``
(``pass`` and ``pwd`` are left out: ``BYPASS``, ``COMPASS``, ``OLDPWD``)."""

KEY_QUALIFIERS = frozenset({
    "api", "secret", "access", "private", "auth", "encryption", "signing", "master", "client", "account",
    "license", "ssh", "session", "service", "app", "hmac", "deploy", "admin", "storage", "subscription", "sas",
    "webhook", "crypt", "encrypt", "openai", "anthropic", "wandb", "ngc", "hf", "huggingface", "mistral", "cohere",
    "groq"})
"""``X_KEY`` is a secret for these X (``API_KEY``, ``SECRET_ACCESS_KEY``, ``OPENAI_KEY``); ``NCCL_IB_PKEY``,
``HOTKEY`` and a bare ``key`` (``sort --key=2``, ``key=0x1234`` in a driver message) are not."""

_WORD = lazy_regex(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_HINT = rb"(?=[A-Za-z0-9_.-]*?(?i:token|secret|pass|pwd|key|auth|credential))[A-Za-z0-9_.-]+"
"""A name that may be a secret's (decided by :func:`secret_name`); keeps the regexes from calling back
for every ``pid=1234``. The hint is looked for ahead and the name taken whole, so that a long run of
name characters costs one pass, not one per way to split it."""


def secret_name(name: str) -> bool:
    """True when a variable, option or field called ``name`` holds a secret."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words:
        return False
    last = words[-1]
    if last == "pwd" and len(words) == 1:
        return False
    if last in SECRET_WORDS or last.endswith(SECRET_SUFFIXES):
        return True
    return last == "key" and len(words) > 1 and words[-2] in KEY_QUALIFIERS


@dataclass(frozen=True)
class Rule:
    """One shape of secret: ``pattern`` finds it and its group ``value`` is what gets masked; a
    group ``name``, when there is one, must be a secret's name (:func:`secret_name`).

    A rule with ``anchors`` runs only on the lines that hold one of those lower-case literals and the
    ``lines`` lines below, as far as its shape reaches (most captured text holds none, and a regex over
    a few lines costs nothing); one without runs over the whole block, its pattern led by a literal so
    that the scan is as fast as a ``find``. ``inner``: the value of a name that is not a secret's is
    searched for secrets itself (``--export=ALL,HF_TOKEN=x``). ``command``: the pattern applies only
    within each match of this one (a program's command line), to every option there, and with
    ``after`` only to the options after that word (``docker login``)."""

    shape: str
    pattern: re.Pattern[bytes]
    anchors: tuple[bytes, ...] = ()
    lines: int = 0
    inner: bool = False
    command: re.Pattern[bytes] | None = None
    after: re.Pattern[bytes] | None = None


_VALUE = rb"(?:\"[^\"\n]*\"|'[^'\n]*'|\\\"[^\"\n]*?\\\"|[^\s\x00'\",;&|)]+)"
"""A pair's value: quoted, quoted with escaped quotes (a command line in a JSON string), or a word."""
_WORD_VALUE = rb"(?:\"[^\"\n]*\"|'[^'\n]*'|\\\"[^\"\n]*?\\\"|[^\s\x00'\";&|)]+)"
"""A command-line word: like a pair's value, but a comma belongs to it (``--password=a,b``)."""
_SEP = rb"[ \t\x00]"
"""Between two words of a command line: a blank, or the NUL of ``/proc/PID/cmdline``."""
_ARGS = rb"(?:[^\n;|&'\"]|'[^'\n]*'|\"[^\"\n]*\")*"
"""The rest of one command, up to the next one on the line (``;``, ``|``, ``&`` outside quotes)."""
_SCHEMES = frozenset({b"", b"bearer", b"basic", b"token", b"digest", b"negotiate", b"apikey", b"ntlm",
                      b"aws4-hmac-sha256"})
"""Authorization schemes: the word a header keeps before its masked credentials (and none)."""
_MASKED = lazy_regex(rb"(?i)['\"\\ \t]*(?:(?:" + b"|".join(sorted(_SCHEMES - {b""})) + rb")[ \t]+)?"
                     + re.escape(MASK.encode()))
"""A value that an earlier rule masked already (or the scheme word before it, ``Bearer ***``)."""
_OPEN_Q = rb"(?<!\\)(?P<q>\\{1,7})?\""
_Q = rb"(?(q)(?P=q))\""
"""A JSON string's quote; in JSON held in a JSON string, such as a line of Docker's ``json-file`` log
(``{"log": "{\\"password\\": \\"x\\"}"}``), escaped with as many backslashes as the first quote of the
match (group ``q``)."""
_JSON_STRING = rb"(?(q)(?:(?!(?P=q)\")[^\n])+|(?:[^\"\\\n]|\\.)+)"
"""A JSON string's characters, escapes included; escaped, up to the closing quote escaped as the first."""
_HINT_WORDS = (b"token", b"secret", b"pass", b"pw", b"key", b"auth", b"credential")
"""Literals of a name that may be a secret's (``pw`` for ``pwd``, ``bindpw``): the anchors of the
name-led rules."""
_NAME_LINES = 3
"""A Kubernetes env entry puts the value up to two lines below its name."""


_AT_LINE = rb"(?:^|(?P<j>(?<=\":\")|(?<=\": \")|(?<=\\n)))"
"""Where a line of a config file starts: at a line's start, or inside a JSON string at its start or
after an escaped newline, as in a record of Docker's ``json-file`` log or of ``journalctl -o json``
(group ``j``: then the line ends at the string's end or at its next escaped newline)."""
_LINE_END = rb"(?=[ \t]*(?(j)(?:\\[nr]|\"|$)|\r?$))"


def _line_value(not_first: bytes) -> bytes:
    """The rest of a config line as a value, trailing blanks left out: its first character is no blank
    nor one of ``not_first``. Greedy to the line's end, then back over the blanks only."""
    return (rb"(?(j)(?:[^\s\"\\" + not_first + rb"]|\\[^nr])(?:(?:[^\"\\\r\n]|\\[^nr])*(?:[^\s\"\\]|\\[^nr]))?"
            rb"|[^\s" + not_first + rb"](?:[^\r\n]*[^\s])?)")


def _command(shape: str, programs: str, option: bytes, anchors: tuple[bytes, ...], *, args: bytes = _ARGS,
             after: bytes | None = None, attached: bool | None = None, value: bytes = _WORD_VALUE) -> Rule:
    """The value of ``option``, each time it occurs on the command line of one of ``programs``
    (``|``-separated names, with or without a path) within ``args``, and after the word ``after``
    when given. ``attached``: True for ``-pX`` only, False for ``-p X`` only, None for either."""
    gap = {True: b"", False: _SEP + b"+", None: _SEP + b"*"}[attached]
    command = re.compile(rb"(?<![\w.-])(?:" + programs.encode() + rb")(?=" + _SEP + rb")" + args)
    return Rule(shape, re.compile(rb"(?P<lead>" + _SEP + option + gap + rb")(?P<value>" + value + rb")"), anchors,
                command=command, after=None if after is None else re.compile(_SEP + after + rb"(?=" + _SEP + rb")"))


def _token(shape: str, prefix: bytes, rest: bytes) -> Rule:
    """A token known by its shape: ``prefix`` then ``rest``, not inside a longer word. The check for
    the character before sits after the prefix, so that the engine can search for the prefix."""
    lit = re.escape(prefix)
    return Rule(shape, re.compile(rb"(?P<value>" + lit + rb"(?<![A-Za-z0-9_]" + lit + rb")(?:" + rest + rb"))"
                                  rb"(?![A-Za-z0-9_])"))


_MYSQL = ("mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlpump|mysqlsh|mysqlbinlog|mariadb"
          "|mariadb-dump|mariadb-admin|mariadb-import|mariadb-check")
_MONGO = "mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|mongostat|mongotop"
_LDAP = "ldapsearch|ldapmodify|ldapadd|ldapdelete|ldapwhoami|ldappasswd|ldapcompare|ldapmodrdn|ldapexop"
_REGISTRY_LOGIN = "docker|podman|nerdctl|buildah|skopeo|oras|helm|crane|regctl"

RULES: tuple[Rule, ...] = (
    Rule("PEM private key block",
         re.compile(rb"(?P<lead>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----\r?\n)(?P<value>(?:[^-]|-(?!----(?:BEGIN|END) ))+)"
                    rb"(?=\r?\n-----END [A-Z0-9 ]*PRIVATE KEY-----)")),
    Rule("Authorization: SCHEME credentials",
         re.compile(rb"(?i)(?P<lead>\b(?:proxy-)?authorization[ \t]*[:=][ \t]*"
                    rb"(?:(?:" + b"|".join(sorted(_SCHEMES - {b""})) + rb")[ \t]+)?)"
                    rb"(?P<value>[^\s\x00'\",]+(?:,[ \t]*[^\s\x00'\",]+)*)"), (b"auth",)),
    Rule("X-Api-Key: and other key headers",
         re.compile(rb"(?i)(?P<lead>\b(?:x-api-key|api-key|x-goog-api-key|x-auth-token|private-token|x-vault-token"
                    rb"|x-amz-security-token|ocp-apim-subscription-key)[ \t]*:[ \t]*)(?P<value>[^\s\x00'\"]+)"),
         (b"key", b"token")),
    Rule("Cookie: / Set-Cookie:",
         re.compile(rb"(?i)(?P<lead>\b(?:set-)?cookie:[ \t]*)(?P<value>[^\s\x00'\"][^\r\n\x00'\"]*)"), (b"cookie:",)),
    Rule("Bearer TOKEN",
         re.compile(rb"(?i)(?P<lead>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})"), (b"bearer",), lines=1),
    _command("mysql -pSECRET (mysqldump, mariadb, ...)", _MYSQL, rb"-p", (b"mysql", b"mariadb"), attached=True),
    _command("sshpass -p SECRET", "sshpass", rb"-p", (b"pass",),
             args=rb"(?:" + _SEP + rb"+(?:-[fdPp]" + _SEP + rb"*" + _WORD_VALUE + rb"|-[evhV]))*"),
    _command("curl -u USER:SECRET, --user, --proxy-user", "curl",
             rb"(?:-u|--user|-U|--proxy-user)(?:=|" + _SEP + rb"*)['\"]?[^:\s\x00'\"]*:", (b"curl",), attached=True,
             value=rb"[^\s\x00'\";&|]+"),
    _command("redis-cli -a SECRET", "redis-cli", rb"-a", (b"redis-cli",), attached=False),
    _command("ipmitool -P SECRET", "ipmitool", rb"-P", (b"ipmitool",)),
    _command("ldapsearch -w SECRET (ldapmodify, ...)", _LDAP, rb"-w", (b"ldap",)),
    _command("mongo -p SECRET (mongosh, mongodump, ...)", _MONGO, rb"-p", (b"mongo",)),
    _command("docker login -p SECRET (podman, helm registry, ...)", _REGISTRY_LOGIN, rb"-p", (b"login",),
             after=rb"login", attached=False),
    Rule("openssl -passin pass:SECRET",
         re.compile(rb"(?P<lead>(?<![\w-])-pass(?:in|out)?" + _SEP + rb"+pass:)(?P<value>" + _WORD_VALUE + rb")"),
         (b"pass",)),
    Rule("netrc: login USER password SECRET",
         re.compile(rb"(?m)(?P<lead>(?:\blogin\s+\S+\s+|(?P<alone>)" + _AT_LINE + rb"[ \t]*)password[ \t]+)"
                    rb"(?P<value>(?(j)(?:[^\s\"\\]|\\[^nr\"])+|[^\s\x00'\"]+))(?(alone)" + _LINE_END + rb")"),
         (b"login", b"pass"), lines=2),
    Rule("requirepass / masterauth / bindpw / rootpw SECRET (config files)",
         re.compile(rb"(?m)(?P<lead>" + _AT_LINE + rb"[ \t]*(?:requirepass|masterauth|bindpw|rootpw)[ \t]+)(?P<value>"
                    + _line_value(rb"#") + rb")" + _LINE_END), (b"pass", b"auth", b"pw")),
    Rule("Kubernetes env entry (JSON)",
         re.compile(_OPEN_Q + rb"name" + _Q + rb"\s*:\s*" + _Q + rb"(?P<name>" + _HINT + rb")" + _Q + rb"\s*,\s*"
                    + _Q + rb"value" + _Q + rb"\s*:\s*" + _Q + rb"(?P<value>" + _JSON_STRING + rb")" + _Q),
         _HINT_WORDS, lines=_NAME_LINES),
    Rule("Kubernetes env entry (YAML)",
         re.compile(rb"(?m)^[ \t]*-[ \t]+name:[ \t]*[\"']?(?P<name>" + _HINT + rb")[\"']?[ \t]*\r?\n"
                    rb"[ \t]+value:[ \t]*(?P<value>[^\r\n]+)"), _HINT_WORDS, lines=_NAME_LINES),
    Rule('"NAME": "SECRET" (JSON, and JSON inside a JSON string)',
         re.compile(_OPEN_Q + rb"(?P<name>" + _HINT + rb")" + _Q + rb"\s*:\s*" + _Q + rb"(?P<value>" + _JSON_STRING
                    + rb")" + _Q), _HINT_WORDS, lines=_NAME_LINES),
    Rule("'NAME': 'SECRET' (a printed Python dict, os.environ)",
         re.compile(rb"'(?P<name>" + _HINT + rb")'\s*:\s*'(?P<value>(?:[^'\\\n]|\\.)+)'"), _HINT_WORDS,
         lines=_NAME_LINES),
    Rule("NAME: SECRET (YAML, kubectl describe)",
         re.compile(rb"(?m)" + _AT_LINE + rb"[ \t]*(?:-[ \t]+)?(?P<name>" + _HINT + rb")[ \t]*:[ \t]+(?P<value>"
                    + _line_value(rb"#") + rb")"), _HINT_WORDS, lines=_NAME_LINES),
    Rule("NAME = SECRET (INI, TOML, ~/.aws/credentials)",
         re.compile(rb"(?m)" + _AT_LINE + rb"[ \t]*(?P<name>" + _HINT + rb")(?:[ \t]+=[ \t]*|=[ \t]+)(?P<value>"
                    + _line_value(rb"") + rb")" + _LINE_END), _HINT_WORDS, lines=_NAME_LINES),
    # The leading literal "-" lets the engine skip most positions quickly; the name starts with a
    # letter or digit, so that a banner "-----Inter-Token Latency-----" is no option.
    Rule("--NAME SECRET, --NAME=SECRET, -NAME SECRET",
         re.compile(rb"(?P<lead>-(?<![\w-]-)-?(?=[A-Za-z0-9])(?P<name>" + _HINT + rb")(?:=|" + _SEP
                    + rb"+(?!-)))(?P<value>" + _WORD_VALUE + rb")"), _HINT_WORDS, lines=_NAME_LINES),
    # The lookahead for "=" lets the engine skip most positions quickly (4x).
    Rule("NAME=SECRET (environment, export, inline PGPASSWORD=x psql, query string)",
         re.compile(rb"(?<![\w.-])(?=[\w.-]*=)(?P<name>" + _HINT + rb")=(?P<value>" + _VALUE + rb")"), _HINT_WORDS,
         lines=_NAME_LINES, inner=True),
    Rule("scheme://USER:SECRET@host",
         re.compile(rb"(?P<lead>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s\x00:@]*:)(?P<value>[^@\s\x00/]+)(?=@)"),
         (b"://",)),
    Rule("webhook URL (Slack, Discord, Teams)",
         re.compile(rb"(?P<lead>\bhooks\.slack\.com/(?:services|workflows|triggers)/|\bdiscord(?:app)?\.com/api/webhooks/"
                    rb"|\.webhook\.office\.com/webhookb2/)(?P<value>[A-Za-z0-9_@.%/-]+)"), (b"hook",)),
    Rule("signed URL ?sig=, X-Amz-Signature=",
         re.compile(rb"(?i)(?P<lead>[?&](?:sig|signature|x-amz-signature|x-goog-signature)=)(?P<value>[^&\s\x00#'\"]+)"),
         (b"sig",)),
    _token("GitHub token ghp_…, github_pat_…", b"g", rb"h[pousr]_[A-Za-z0-9]{36,}|ithub_pat_[A-Za-z0-9_]{22,}"),
    _token("GitLab token glpat-…", b"gl", rb"(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}"),
    _token("Slack token xoxb-…, xapp-…", b"x", rb"ox[abeprs]-[A-Za-z0-9-]{10,}|app-[0-9]-[A-Za-z0-9-]{10,}"),
    _token("Hugging Face token hf_…", b"hf_", rb"[A-Za-z0-9]{30,}"),
    _token("OpenAI / Anthropic key sk-…, Stripe sk_live_…", b"sk",
           rb"-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}|_(?:live|test)_[A-Za-z0-9]{16,}"),
    _token("NVIDIA API key nvapi-…", b"nvapi-", rb"[A-Za-z0-9_-]{20,}"),
    _token("npm token npm_…", b"npm_", rb"[A-Za-z0-9]{36}"),
    _token("PyPI token pypi-AgE…", b"pypi-AgE", rb"[A-Za-z0-9_-]{20,}"),
    _token("Docker Hub token dckr_pat_…", b"dckr_pat_", rb"[A-Za-z0-9_-]{20,}"),
    _token("AWS key id AKIA…, ASIA…, Google API key AIza…", b"A",
           rb"KIA[0-9A-Z]{16}|SIA[0-9A-Z]{16}|Iza[0-9A-Za-z_-]{35}"),
    _token("Google OAuth token ya29.…", b"ya29.", rb"[A-Za-z0-9_-]{20,}"),
    _token("JWT eyJ….eyJ….…", b"eyJ", rb"[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
)
"""Applied in this order: once a value is masked, a later rule whose value starts with the mask leaves
it, so that ``Authorization: Bearer x`` keeps its scheme word, a key block is masked whole and
``mysql -pSECRET db`` is not read as an option ``-pSECRET`` with the value ``db``; a later value that
holds the mask further in (an earlier rule took a part of it for something else) is masked whole."""

_INNER = frozenset(rule.pattern for rule in RULES if rule.inner)
_STAGES = tuple((anchored, tuple(rules)) for anchored, rules in itertools.groupby(RULES, key=lambda r: bool(r.anchors)))
"""Runs of rules with and without anchors, applied one run after the other."""
_REACH = {anchor: max(rule.lines for rule in RULES if anchor in rule.anchors)
          for anchor in dict.fromkeys(anchor for rule in RULES for anchor in rule.anchors)}
"""Each anchor, and how many lines below its own the rules it calls for may reach."""


def redact_bytes(data: bytes) -> tuple[bytes, int]:
    """Scrub one block of text; returns the new bytes and how many values were masked.

    A plain regex pass over every pattern runs at ~5 MB/s; most captured text (kernel and NCCL
    logs) holds no anchor at all, so the anchored rules run only on the few lines near one and the
    others are searched by their leading literal: 33 scans of the block, each about as fast as a
    ``find``."""
    count = 0
    mask_bytes = MASK.encode()

    def mask(match: re.Match[bytes]) -> bytes:
        nonlocal count
        value = match.group("value")
        if "name" in match.re.groupindex and not secret_name(match.group("name").decode("ascii", "replace")):
            if match.re in _INNER:
                inner, n = redact_bytes(value)
                count += n
                return match.group(0)[: match.start("value") - match.start(0)] + inner
            return match.group(0)
        # masked by an earlier rule: leave it; but not when that rule took a part of this secret for
        # something else (``'sshpass -p***'``)
        if _MASKED.match(value):
            return match.group(0)
        count += 1
        quote = value[:1] if value[:1] in (b'"', b"'") and value[-1:] == value[:1] and len(value) > 1 else b""
        whole, start, end = match.group(0), match.start("value") - match.start(0), match.end("value") - match.start(0)
        return whole[:start] + quote + mask_bytes + quote + whole[end:]

    for stage, (anchored, rules) in enumerate(_STAGES):
        if not anchored:
            for rule in rules:
                data = rule.pattern.sub(mask, data)
            continue
        regions = _regions(data.lower())
        if regions:
            pieces, pos = [], 0
            for start, end, anchors in regions:
                piece = data[start:end]
                for rule in _rules(stage, anchors):
                    if rule.command is None:
                        piece = rule.pattern.sub(mask, piece)
                    else:
                        piece = rule.command.sub(lambda m, r=rule: _in_command(r, m.group(0), mask), piece)
                pieces += [data[pos:start], piece]
                pos = end
            pieces.append(data[pos:])
            data = b"".join(pieces)
    return data, count


def _in_command(rule: Rule, command: bytes, mask: Callable[[re.Match[bytes]], bytes]) -> bytes:
    """One command line with ``rule``'s options masked (those after its ``after`` word, if it has one)."""
    start = 0
    if rule.after is not None:
        word = rule.after.search(command)
        if word is None:
            return command
        start = word.end()
    return command[:start] + rule.pattern.sub(mask, command[start:])


@functools.lru_cache(maxsize=1024)
def _rules(stage: int, anchors: frozenset[bytes]) -> tuple[Rule, ...]:
    """The rules of one stage, in order, that one of ``anchors`` calls for."""
    return tuple(rule for rule in _STAGES[stage][1] if not anchors.isdisjoint(rule.anchors))


def _regions(low: bytes) -> list[tuple[int, int, frozenset[bytes]]]:
    """Byte ranges of the lowered block, whole lines, from each line holding an anchor to as many
    lines below it as the anchor's rules reach, each with the anchors found in it."""
    hits: list[tuple[int, int, bytes]] = []
    for anchor, reach in _REACH.items():
        at = low.find(anchor)
        while at != -1:
            line = low.rfind(b"\n", 0, at) + 1
            nxt = end = low.find(b"\n", at) + 1 or len(low)
            for _ in range(reach):
                if end == len(low):
                    break
                end = low.find(b"\n", end) + 1 or len(low)
            hits.append((line, end, anchor))
            at = low.find(anchor, nxt) if nxt < len(low) else -1
    hits.sort()
    regions: list[tuple[int, int, set[bytes]]] = []
    for line, end, anchor in hits:
        if regions and line <= regions[-1][1]:
            regions[-1] = (regions[-1][0], max(regions[-1][1], end), regions[-1][2])
            regions[-1][2].add(anchor)
        else:
            regions.append((line, end, {anchor}))
    return [(start, end, frozenset(found)) for start, end, found in regions]


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of an environment with secret-named values masked, and secrets inside values too."""
    out = {}
    for name, value in env.items():
        if secret_name(name):
            out[name] = MASK
        else:
            out[name] = redact_bytes(value.encode("utf-8", "replace"))[0].decode("utf-8", "replace")
    return out


def redact_argv(argv: list[str]) -> list[str]:
    """A command's argv with its secrets masked, judged as one command line: ``["mysql", "--password",
    "x"]`` hides ``x``, which scrubbing each word alone would miss. The words are joined with NUL, as
    in ``/proc/PID/cmdline``; no rule matches across a NUL inside a value, so the words stay apart."""
    joined = "\x00".join(argv).encode("utf-8", "surrogateescape")
    return redact_bytes(joined)[0].decode("utf-8", "surrogateescape").split("\x00")
