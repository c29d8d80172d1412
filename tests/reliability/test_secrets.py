"""Secrets under hostile input: a secret in any documented shape, wherever it is embedded, never reaches
what a capture stores, and evidence that only looks like one comes out byte-identical.

The property tests draw a secret, put it into one shape (docs/data-flow.md lists them) and that into
one container (an environment dump, ``/proc/PID/environ`` or ``/proc/PID/cmdline`` with its NULs, a
``ps`` line, shell history, a log line, a Docker ``json-file`` line, a pod spec, a printed
``os.environ``), and push the text through the capture's own path: ``LiveContext.emit`` (the bytes of
an artifact and its ``info``) and ``LiveContext.missing`` (a coverage note), then read the spool back.
No run of six characters of the secret may survive, unless the text around the secret holds it.

End to end, a real ``gpuwb capture --only host`` runs with the secrets in its environment, and an
in-process capture with a collector that emits every shape through ``ctx.run``, ``ctx.read_file`` and
data; every table and every artifact (expanded from its chunks) of the bundle is searched."""

from __future__ import annotations

import json
import random
import shlex
import string
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.base import Artifact
from collectors.framework import registry
from collectors.framework.redact import MASK, redact_argv, redact_bytes, redact_env
from tests.reliability.conftest import ROOT, gpuwb
from workbench.capture.live import capture
from workbench.capture.live_context import LiveContext
from workbench.store.bundle import Bundle

WORD = string.ascii_letters + string.digits + "-_.+~^%=!"
"""What a secret given as one unquoted word may hold (docs/data-flow.md: a value ends at whitespace, a
quote, ``;``, ``&``, ``|``, ``)``, and a pair's at ``,``)."""
SPACED = WORD + " "
"""What a quoted secret may hold as well."""
TOKENISH = string.ascii_letters + string.digits + "._~+/=-"
"""The characters of a bearer token (RFC 6750)."""
ALNUM = string.ascii_letters + string.digits
WINDOW = 6


def secrets_of(alphabet: str) -> st.SearchStrategy[str]:
    """Secrets of 8 to 40 characters that start and end with a letter or digit."""
    return st.text(alphabet=alphabet, min_size=8, max_size=40).filter(
        lambda s: s[0] in ALNUM and s[-1] in ALNUM)


# -- shapes: each turns a secret into text a host may hold ------------------------------------------

Shape = Callable[[str], str]

COMMANDS: dict[str, Shape] = {
    "--password word": lambda s: f"python train.py --password {s} --lr 3e-4",
    "--api-key=word": lambda s: f"vllm serve llama --api-key={s} --port 8000",
    "-token word (Go flags)": lambda s: f"exporter -token {s} -listen :9400",
    "--hf-token word": lambda s: f"huggingface-cli login --hf-token {s}",
    "inline PGPASSWORD": lambda s: f"PGPASSWORD={s} psql -h db -U app appdb",
    "inline MYSQL_PWD": lambda s: f"MYSQL_PWD={s} mysql -h db -u root",
    "mysql -pX": lambda s: f"mysql -u root -p{s} appdb",
    "mysqldump -pX after options": lambda s: f"/usr/bin/mysqldump --single-transaction -uroot -p{s} slurm_acct_db",
    "mariadb -pX": lambda s: f"mariadb -h db -p{s}",
    "sshpass -p X": lambda s: f"sshpass -p {s} ssh -p 2222 root@node07",
    "sshpass -pX": lambda s: f"sshpass -p{s} scp a node07:/tmp",
    "sshpass -P prompt -p X": lambda s: f"sshpass -P assword -p {s} ssh node07",
    "curl -u user:X": lambda s: f"curl -s -u alice:{s} https://127.0.0.1/v1",
    "curl --user user:X": lambda s: f"curl --user alice:{s} https://127.0.0.1/v1",
    "curl --user=user:X": lambda s: f"curl --user=alice:{s} https://127.0.0.1/v1",
    "curl -uuser:X": lambda s: f"curl -ualice:{s} https://127.0.0.1/v1",
    "curl --proxy-user": lambda s: f"curl -x http://127.0.0.1:3128 --proxy-user bob:{s} https://127.0.0.1",
    "redis-cli -a": lambda s: f"redis-cli -h cache -p 6379 -a {s} ping",
    "ipmitool -P": lambda s: f"ipmitool -I lanplus -H bmc07 -U admin -P {s} sel elist",
    "ldapsearch -w": lambda s: f"ldapsearch -x -H ldap://ldap -D cn=admin,dc=example -w {s} -b dc=example",
    "mongosh -p": lambda s: f"mongosh --host db -u admin -p {s} --authenticationDatabase admin",
    "docker login -p": lambda s: f"docker login -u me -p {s} nvcr.io",
    "openssl -passin": lambda s: f"openssl rsa -in key.pem -passin pass:{s} -out plain.pem",
    "curl Authorization Bearer": lambda s: f"curl -H 'Authorization: Bearer {s}' https://127.0.0.1:8443",
    "curl Authorization Basic": lambda s: f"curl -H 'Authorization: Basic {s}' https://127.0.0.1:8443",
    "curl X-Api-Key": lambda s: f"curl -H 'X-Api-Key: {s}' https://127.0.0.1:8443",
    "git clone with password": lambda s: f"git clone https://oauth2:{s}@gitlab.example.com/org/repo.git",
    "psql URL": lambda s: f"psql postgresql://app:{s}@db:5432/app",
    "redis URL without user": lambda s: f"celery worker --broker redis://:{s}@cache:6379/0",
    "query token=": lambda s: f"curl https://127.0.0.1/v1/jobs?token={s}&page=2",
    "query api_key=": lambda s: f"wget https://127.0.0.1/v1?api_key={s}",
    "query sig=": lambda s: f"azcopy copy 'https://acct.blob.core.windows.net/c/ckpt.pt?sv=2022-11-02&sig={s}' .",
    "srun --export": lambda s: f"srun --export=ALL,HF_TOKEN={s} python train.py",
}
"""Command lines; the secret is one shell word, so they also go into argv, NUL-separated or ps-joined."""

QUOTED_COMMANDS: dict[str, Shape] = {
    "--password 'quoted words'": lambda s: f"python train.py --password '{s}' --lr 3e-4",
    "--token \"quoted words\"": lambda s: f'python train.py --token "{s}"',
    "mysql -p'quoted words'": lambda s: f"mysql -u root -p'{s}' appdb",
    "PASSWORD='quoted words'": lambda s: f"DB_PASSWORD='{s}' ./migrate",
    "sshpass -p 'quoted words'": lambda s: f"sshpass -p '{s}' ssh node07",
}
"""Command lines whose secret is quoted and may hold spaces: text only (a shell would split it)."""

TEXTS: dict[str, Shape] = {
    "Authorization header": lambda s: f"> Authorization: Bearer {s}\r\n> Accept: */*",
    "Proxy-Authorization header": lambda s: f"Proxy-Authorization: Basic {s}",
    "Cookie header": lambda s: f"Cookie: session={s}; theme=dark",
    "Set-Cookie header": lambda s: f"< Set-Cookie: sid={s}; Path=/; HttpOnly",
    "netrc one line": lambda s: f"machine api.example.com login bob password {s}",
    "json": lambda s: json.dumps({"user": "bob", "password": s, "apiKey": s}),
    "json in a json string": lambda s: json.dumps({"log": json.dumps({"client_secret": s}) + "\n", "stream": "stdout"}),
    "log line key=value": lambda s: f"level=info msg=\"connected\" secret={s} retries=3",
}
"""Text that is not a command line; the secret may be anything a word holds."""

CONFIG_LINES: dict[str, Shape] = {
    "netrc lines": lambda s: f"machine api.example.com\n  login bob\n  password {s}",
    "redis.conf": lambda s: f"# requirepass foobared\nrequirepass {s}\nmasterauth {s}",
    "nslcd.conf": lambda s: f"uri ldap://ldap\nbindpw {s}",
    "aws credentials": lambda s: f"[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = {s}\n",
    "pypirc": lambda s: f"[pypi]\nusername = __token__\npassword = {s}",
    "yaml": lambda s: f"db:\n  host: db\n  password: {s}\n  port: 5432",
    "kubectl describe": lambda s: f"    Environment:\n      RANK:      0\n      HF_TOKEN:  {s}",
}
"""Lines of a config file: known at a line's start (docs/data-flow.md), so not after a log prefix."""

SPACED_TEXTS: dict[str, Shape] = {
    "yaml words": lambda s: f"  password: {s}",
    "ini words": lambda s: f"password = {s}",
    "json words": lambda s: json.dumps({"password": s}),
    "printed dict words": lambda s: repr({"HF_TOKEN": s, "RANK": "0"}),
    "requirepass words": lambda s: f"requirepass {s}",
}

SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "PGPASSWORD", "MYSQL_PWD",
                "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY", "NGC_API_KEY",
                "SSHPASS", "REDISCLI_AUTH", "DB_PASSWORD", "SLACK_BOT_TOKEN", "IPMI_PASSWORD", "CLIENT_SECRET",
                "ANTHROPIC_API_KEY", "RSYNC_PASSWORD")
"""Variables whose value is a secret whatever it looks like."""

CARRIERS: dict[str, Shape] = {
    "DATABASE_URL": lambda s: f"postgresql://app:{s}@db:5432/app",
    "CELERY_BROKER_URL": lambda s: f"redis://:{s}@cache:6379/0",
    "LAUNCH_CMD": lambda s: f"sshpass -p {s} ssh node07",
    "DB_CLI": lambda s: f"mysql -uroot -p{s}",
}
"""Variables not named for a secret whose value holds one in a shape."""

BENIGN_ENV = {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "NCCL_IB_PKEY": "0x8001",
              "TOKENIZERS_PARALLELISM": "false", "PWD": "/home/u", "MASTER_PORT": "29500"}

ENV_DUMPS: dict[str, Callable[[dict[str, str]], str]] = {
    "printenv": lambda env: "".join(f"{k}={v}\n" for k, v in env.items()),
    "export": lambda env: "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()),
    "declare -x": lambda env: "".join(f'declare -x {k}="{v}"\n' for k, v in env.items()),
    "/proc/PID/environ": lambda env: "".join(f"{k}={v}\x00" for k, v in env.items()),
    "json object": lambda env: json.dumps(env, indent=2),
    "docker inspect Env": lambda env: json.dumps({"Config": {"Env": [f"{k}={v}" for k, v in env.items()]}}, indent=4),
    "printed os.environ": lambda env: f"environ({env!r})",
    "pod spec json": lambda env: json.dumps({"env": [{"name": k, "value": v} for k, v in env.items()]}, indent=2),
    "pod spec yaml": lambda env: "  env:\n" + "".join(f"  - name: {k}\n    value: \"{v}\"\n" for k, v in env.items()),
    "kubectl describe": lambda env: "    Environment:\n" + "".join(f"      {k}:  {v}\n" for k, v in env.items()),
    "host facts": lambda env: json.dumps({"env": redact_env(env)}, indent=1),
}
"""How an environment reaches a capture; "host facts" is what collectors/host.py stores."""
QUOTED_DUMPS = ("declare -x", "json object", "printed os.environ", "pod spec json", "pod spec yaml",
                "kubectl describe", "host facts")

CONFIG_CONTAINERS: dict[str, Shape] = {
    "bare": lambda text: text,
    "between evidence": lambda text: ("NVRM: Xid (PCI:0000:19:00): 79, pid=1234, GPU has fallen off the bus.\n"
                                      f"{text}\nnode07:4242:4242 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n"),
    "docker json-file": lambda text: "".join(json.dumps({"log": line + "\n", "stream": "stderr",
                                                         "time": "2026-06-03T14:00:00.1Z"}) + "\n"
                                             for line in text.splitlines()),
    "json string": lambda text: json.dumps({"config": text, "n": 1}),
}
"""Where a line stays a line: in a file, among other evidence, in JSON strings."""
LINE_CONTAINERS: dict[str, Shape] = {
    **CONFIG_CONTAINERS,
    "log line": lambda line: f"2026-06-03T14:00:00.123456+00:00 node07 launcher[4242]: running {line}",
    "cri log line": lambda line: f"2026-06-03T14:00:00.123456789Z stderr F {line}",
}
COMMAND_CONTAINERS: dict[str, Shape] = {
    **LINE_CONTAINERS,
    "bash history": lambda cmd: f"  512  {cmd}",
    "zsh history": lambda cmd: f": 1717000000:0;{cmd}",
    "/proc/PID/cmdline": lambda cmd: "\x00".join(shlex.split(cmd)) + "\x00",
    "ps line": lambda cmd: f"root      4242  0.3  1.2 123456 7890 ?  Ssl  14:00   0:01 {' '.join(shlex.split(cmd))}",
    "json field": lambda cmd: json.dumps({"pid": 4242, "cmdline": cmd}),
}


# -- the capture's own path -------------------------------------------------------------------------

def captured(text: str) -> str:
    """Everything the capture spools for ``text`` given as an artifact's data, its source name, its
    ``info`` and a coverage note: the spooled bytes and the manifest the bundle is built from."""
    with tempfile.TemporaryDirectory(prefix="gpuwb-secrets-") as spool:
        ctx = LiveContext(Path(spool), "node07", None, {}, True)
        ctx.emit(Artifact(source=text, kind="secrets_text", data=text.encode(), info={"origin": text}))
        ctx.missing(text, text)
        ctx._manifest.close()  # the child process closes it at its exit
        parts = [p.read_bytes().decode("utf-8", "replace") for p in sorted(Path(spool).iterdir())]
    return "\n".join(parts)


def leaked(secret: str, out: str, around: str) -> list[str]:
    """Runs of ``WINDOW`` characters of ``secret`` in ``out`` that neither ``around`` (what is stored for
    the same text with an empty secret: the words around it, the manifest's keys and times) nor the
    mask holds."""
    n = min(WINDOW, len(secret))
    runs = {secret[i:i + n] for i in range(len(secret) - n + 1)}
    return sorted(r for r in runs if r in out and r not in around and r not in MASK)


def json_records(text: str) -> list[object] | None:
    """The JSON document ``text`` is, or the JSON lines it is made of; None when it is neither."""
    for parts in ([text], text.splitlines()):
        try:
            return [json.loads(part) for part in parts]
        except ValueError:
            continue
    return None


def assert_hidden(secret: str, make: Shape) -> None:
    """The secret is not stored; what is stored is redacted for good (a second pass masks nothing) and
    still parses as the JSON it was (a mask that swallowed a quote would lose every host fact)."""
    text = make(secret)
    out = captured(text)
    assert not leaked(secret, out, captured(make("")) + ' "redacted_values": '), (text, out)
    assert MASK in out
    once, _ = redact_bytes(text.encode())
    assert redact_bytes(once) == (once, 0)
    records = json_records(text)
    if records is not None:
        again = json_records(once.decode())
        assert again is not None and len(again) == len(records), once


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(sorted(COMMANDS)),
       container=st.sampled_from(sorted(COMMAND_CONTAINERS)))
def test_a_secret_on_a_command_line_is_never_captured(data, shape, container):
    secret = data.draw(secrets_of(TOKENISH if "Bearer" in shape else WORD), label="secret")
    assert_hidden(secret, lambda s: COMMAND_CONTAINERS[container](COMMANDS[shape](s)))


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(sorted(QUOTED_COMMANDS)),
       container=st.sampled_from(sorted(LINE_CONTAINERS)))
def test_a_quoted_secret_with_spaces_is_never_captured(data, shape, container):
    secret = data.draw(secrets_of(SPACED), label="secret")
    assert_hidden(secret, lambda s: LINE_CONTAINERS[container](QUOTED_COMMANDS[shape](s)))


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(sorted(TEXTS)), container=st.sampled_from(sorted(LINE_CONTAINERS)))
def test_a_secret_in_text_is_never_captured(data, shape, container):
    secret = data.draw(secrets_of(WORD), label="secret")
    assert_hidden(secret, lambda s: LINE_CONTAINERS[container](TEXTS[shape](s)))


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(sorted(CONFIG_LINES)),
       container=st.sampled_from(sorted(CONFIG_CONTAINERS)))
def test_a_secret_in_a_config_line_is_never_captured(data, shape, container):
    secret = data.draw(secrets_of(WORD), label="secret")
    assert_hidden(secret, lambda s: CONFIG_CONTAINERS[container](CONFIG_LINES[shape](s)))


@SETTINGS
@given(secret=secrets_of(SPACED), shape=st.sampled_from(sorted(SPACED_TEXTS)))
def test_a_secret_with_spaces_in_text_is_never_captured(secret, shape):
    assert_hidden(secret, SPACED_TEXTS[shape])


@SETTINGS
@given(data=st.data(), dump=st.sampled_from(sorted(ENV_DUMPS)), name=st.sampled_from(SECRET_NAMES + tuple(CARRIERS)))
def test_a_secret_in_an_environment_is_never_captured(data, dump, name):
    spaced = dump in QUOTED_DUMPS and name in SECRET_NAMES
    secret = data.draw(secrets_of(SPACED if spaced else WORD), label="secret")
    value = CARRIERS[name] if name in CARRIERS else (lambda s: s)
    assert_hidden(secret, lambda s: ENV_DUMPS[dump]({**BENIGN_ENV, name: value(s), "LANG": "C.UTF-8"}))


TOKEN_SHAPES: dict[str, st.SearchStrategy[str]] = {
    "ghp_": st.text(ALNUM, min_size=36, max_size=40).map(lambda s: "ghp_" + s),
    "github_pat_": st.text(ALNUM + "_", min_size=22, max_size=82).map(lambda s: "github_pat_" + s),
    "glpat-": st.text(ALNUM + "_-", min_size=20, max_size=26).map(lambda s: "glpat-" + s),
    "xoxb-": st.text(ALNUM + "-", min_size=10, max_size=60).map(lambda s: "xoxb-" + s),
    "hf_": st.text(ALNUM, min_size=34, max_size=34).map(lambda s: "hf_" + s),
    "sk-proj-": st.text(ALNUM + "_-", min_size=20, max_size=64).map(lambda s: "sk-proj-" + s),
    "nvapi-": st.text(ALNUM + "_-", min_size=20, max_size=70).map(lambda s: "nvapi-" + s),
    "AKIA": st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(lambda s: "AKIA" + s),
    "AIza": st.text(ALNUM + "_-", min_size=35, max_size=35).map(lambda s: "AIza" + s),
    "JWT": st.tuples(*[st.text(ALNUM + "_-", min_size=10, max_size=40)] * 3).map(
        lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[2]}"),
}
BARE: dict[str, Shape] = {
    "words around": lambda t: f"downloading with {t} from the hub",
    "quoted": lambda t: f"token='{t}'",
    "end of line": lambda t: f"using\t{t}\n",
    "in a url path": lambda t: f"https://x-access-token:{t}@github.com/org/repo",
    "json": lambda t: json.dumps({"t": t}),
}


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(sorted(TOKEN_SHAPES)), place=st.sampled_from(sorted(BARE)))
def test_a_token_known_by_its_shape_is_never_captured(data, shape, place):
    token = data.draw(TOKEN_SHAPES[shape], label="token")
    assert_hidden(token, BARE[place])


@settings(max_examples=100, deadline=None)
@given(key=st.lists(st.text(string.ascii_letters + string.digits + "+/", min_size=64, max_size=64), min_size=1,
                    max_size=30), kind=st.sampled_from(["RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", ""]))
def test_a_private_key_block_is_never_captured(key, kind):
    body = "\n".join(key)
    out = captured(f"ssh config:\n-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----\n")
    assert not [line for line in key if line in out]


# -- redaction keeps evidence -------------------------------------------------------------------------

def test_every_corpus_file_comes_out_byte_identical():
    """Real evidence (Xid lines, PCI ids, GPU UUIDs, hex digests, NCCL settings, ``-p``/``-P`` of other
    programs) holds no secret: not one byte may change."""
    changed = []
    files = sorted(p for p in (ROOT / "tests" / "corpus").rglob("*") if p.is_file())
    assert len(files) > 50
    for path in files:
        data = path.read_bytes()
        if redact_bytes(data) != (data, 0):
            changed.append(str(path.relative_to(ROOT)))
    assert changed == []


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.sampled_from(sorted({line for p in sorted((ROOT / "tests" / "corpus").rglob("*.log"))
                                              for line in p.read_bytes().splitlines()})), min_size=1, max_size=40))
def test_any_mix_of_corpus_lines_comes_out_byte_identical(lines):
    """Lines of real evidence side by side: anchors of one line do not make a rule mask the next."""
    data = b"\n".join(lines)
    assert redact_bytes(data) == (data, 0)


# -- hostile input: no pattern backtracks into quadratic time --------------------------------------------

HOSTILE_SIZE = 1 << 18
HOSTILE = {
    "docker before no login": b"login " + b"docker " * (HOSTILE_SIZE // 7),
    "key blocks never ended": b"-----BEGIN PRIVATE KEY-----\n" * (HOSTILE_SIZE // 28),
    "a run of backslashes": b"token " + b"\\" * HOSTILE_SIZE,
    "a json name never closed": b'"' + b"token" * (HOSTILE_SIZE // 5),
    "a printed dict name never closed": b"'" + b"token" * (HOSTILE_SIZE // 5),
    "an option name run": b" -" + b"token" * (HOSTILE_SIZE // 5),
    "blanks inside an ini value": b"password = x" + b" " * HOSTILE_SIZE + b"y",
    "blanks inside a yaml value": b"password: x" + b" " * HOSTILE_SIZE + b"y",
    "a scheme run": b"a" * HOSTILE_SIZE + b"://",
    "userinfo never ended": b"https://" + b"u:" * (HOSTILE_SIZE // 2),
    "sk- runs": b"sk-" * (HOSTILE_SIZE // 3),
    "eyJ runs": b"eyJ." * (HOSTILE_SIZE // 4),
    "mysql words": b"mysql " * (HOSTILE_SIZE // 6),
    "sshpass prompts": b"sshpass" + b" -P x" * (HOSTILE_SIZE // 5),
    "curl users": b"curl " + b"-u x" * (HOSTILE_SIZE // 4),
    "netrc logins": b"login " * (HOSTILE_SIZE // 6) + b"password",
    "header list": b"Authorization: " + b"a," * (HOSTILE_SIZE // 2),
    "pairs without names": b"token " + b"x=" * (HOSTILE_SIZE // 2),
    "NULs": b"key" + b"\x00" * HOSTILE_SIZE,
    "escaped quote never closed": b'token \\"' + b"a" * HOSTILE_SIZE,
    "a secret on every line": b"token=1\n" * (HOSTILE_SIZE // 8),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_redacted_in_linear_time(name):
    """256 KiB built to make a backtracking pattern go quadratic (minutes where linear takes 0.1 s): a
    capture would overrun its collector's deadline and lose what it had."""
    started = time.process_time()
    redact_bytes(HOSTILE[name])
    assert time.process_time() - started < 5


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2000) | st.text(alphabet=WORD + " \n\t\x00'\"\\:=,;-@/", max_size=400).map(str.encode))
def test_any_bytes_are_redacted_for_good_without_error(data):
    once, _ = redact_bytes(data)
    assert redact_bytes(once) == (once, 0)


# -- argv: the words of a command judged together -------------------------------------------------------

@SETTINGS
@given(data=st.data(), shape=st.sampled_from(sorted(COMMANDS)))
def test_redact_argv_hides_a_secret_given_as_its_own_word(data, shape):
    secret = data.draw(secrets_of(TOKENISH if "Bearer" in shape else WORD), label="secret")
    argv = shlex.split(COMMANDS[shape](secret))
    joined = "\n".join(redact_argv(argv))
    assert not leaked(secret, joined, COMMANDS[shape](""))
    assert len(redact_argv(argv)) == len(argv)


def test_a_run_commands_argv_is_scrubbed_as_one_command_line(tmp_path):
    ctx = LiveContext(tmp_path, "node07", None, {}, True)
    artifact = ctx.run(["echo", "mysql", "-u", "root", "--password", "argvsecret1"], kind="secrets_text")
    ctx.emit(artifact)
    ctx._manifest.close()
    assert "argvsecret1" not in (tmp_path / "manifest.jsonl").read_text()


# -- end to end: the bundle a capture writes ------------------------------------------------------------

def stored_text(path: Path) -> str:
    """Every value of every table (BLOBs as raw bytes) and every artifact's bytes, expanded from its
    chunks one by one and whole (a secret may straddle two chunks)."""
    parts: list[str] = []
    with Bundle.open(path) as bundle:
        tables = [r[0] for r in bundle.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()]
        assert "artifact_chunk" in tables and "host_inventory" in tables
        for table in tables:
            for row in bundle.con.execute(f'SELECT * FROM "{table}"').fetchall():
                parts.extend(v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in row if v is not None)
        for art in bundle.artifacts():
            chunks = [bundle.artifact_chunk(art["id"], seq) for seq in range(bundle.artifact_chunk_count(art["id"]))]
            assert b"".join(chunks) == b"".join(bundle.artifact_bytes(art["id"]))
            parts.extend(c.decode("utf-8", "replace") for c in chunks)
            parts.append(b"".join(chunks).decode("utf-8", "replace"))
    return "\n".join(parts)


def fixed_secrets(seed: int) -> Callable[[str], str]:
    """A distinct, reproducible secret per label: ``secret(label)``, ``Zq`` and 18 letters or digits."""
    rng = random.Random(seed)
    made: dict[str, str] = {}

    def secret(label: str) -> str:
        if label not in made:
            made[label] = "Zq" + "".join(rng.choice(ALNUM) for _ in range(18))
        return made[label]
    return secret


def planted(text: str) -> list[str]:
    """The ``Zq…`` secrets a text holds."""
    out, at = [], text.find("Zq")
    while at != -1:
        out.append(text[at:at + 20])
        at = text.find("Zq", at + 20)
    return out


def test_a_real_capture_stores_no_secret_of_its_environment(tmp_path):
    """``gpuwb capture --only host`` as a user runs it, with secrets in its environment in every shape:
    secret-named variables, and variables that carry a command line, a URL or a header. Every planted
    variable is there, as a host fact with its value masked, which proves the search looks in the
    right places (host facts mask the environment even under ``--no-redact``)."""
    secret = fixed_secrets(1)
    env = {name: secret(name) for name in SECRET_NAMES}
    env.update({name: make(secret(name)) for name, make in CARRIERS.items()})
    env.update({f"GPUWB_T_CMD_{n:02d}": make(secret(shape))
                for n, (shape, make) in enumerate(sorted(COMMANDS.items()))})
    env.update({f"GPUWB_T_TEXT_{n:02d}": make(secret(shape)) for n, (shape, make) in enumerate(sorted(TEXTS.items()))
                if "\n" not in make("x")})
    env["SLACK_WEBHOOK"] = f"https://hooks.slack.com/services/T0001/B0002/{secret('slack')}"
    secrets = [s for value in env.values() for s in planted(value)]
    env["NCCL_IB_HCA"] = "mlx5_0"
    assert len(secrets) > 60
    done = gpuwb("capture", "-o", str(tmp_path / "host.duckdb"), "--only", "host", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    stored = stored_text(tmp_path / "host.duckdb")
    assert [s for s in secrets if s in stored] == []
    with Bundle.open(tmp_path / "host.duckdb") as bundle:
        facts = dict(bundle.con.execute("SELECT key, value FROM host_inventory").fetchall())
    assert [name for name in env if name != "NCCL_IB_HCA" and MASK not in facts.get(f"env.{name}", "")] == []
    assert facts["env.NCCL_IB_HCA"] == "mlx5_0"
    assert facts["env.GPUWB_T_CMD_00"] == f"vllm serve llama --api-key={MASK} --port 8000"


def _every_shape(secret: Callable[[str], str]) -> str:
    """One text with every shape of this file, each holding its own secret."""
    blocks = [make(secret(shape))
              for shape, make in sorted({**COMMANDS, **QUOTED_COMMANDS, **TEXTS, **CONFIG_LINES}.items())]
    blocks += [ENV_DUMPS[dump]({**BENIGN_ENV, **{name: secret(f"{dump} {name}") for name in SECRET_NAMES}})
               for dump in sorted(ENV_DUMPS)]
    blocks.append("\x00".join(shlex.split(COMMANDS["sshpass -p X"](secret("cmdline")))))
    return "\n".join(blocks) + "\n"


def test_a_capture_bundle_holds_no_secret_from_any_capture_path(tmp_path, monkeypatch):
    """An in-process capture whose collector puts every shape through each way a collector captures:
    a command's output (``ctx.run``), a file it copies (``ctx.read_file``), data it builds, and the
    names, ``info`` and coverage notes of all three."""
    secret = fixed_secrets(2)
    text = _every_shape(secret)
    evidence = tmp_path / "evidence.txt"
    evidence.write_text(text)

    def collect(ctx):
        yield ctx.run(["cat", str(evidence)], kind="secrets_text")
        art = ctx.read_file(str(evidence), kind="secrets_text")
        assert art is not None
        yield art
        yield Artifact(source=f"built {text.splitlines()[0]}", kind="secrets_text", data=text.encode(),
                       info={"built_from": text.splitlines()})
        ctx.missing(text.splitlines()[1], f"unavailable: {text.splitlines()[2]}")

    module = types.ModuleType("fake_secrets")
    module.NAME, module.LAYER, module.KINDS, module.TIMEOUT, module.PRIORITY = (
        "secrets", "host", ("secrets_text",), 30.0, 50)
    module.capture = collect
    module.parse = lambda kind, stream, ctx: iter(())
    monkeypatch.setattr(registry, "all_collectors", lambda: (module,))
    secrets = planted(text)
    assert len(secrets) > 150
    for redact, name in ((True, "r.duckdb"), (False, "plain.duckdb")):
        _, outcomes, _ = capture(tmp_path / name, redact=redact)
        assert [o.status for o in outcomes] == ["partial"], [(o.status, o.reason) for o in outcomes]
    stored = stored_text(tmp_path / "r.duckdb")
    assert [s for s in secrets if s in stored] == []
    plain = stored_text(tmp_path / "plain.duckdb")
    assert [s for s in secrets if s not in plain] == []
