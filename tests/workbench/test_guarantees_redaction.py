"""Redaction end to end: whatever a collector captures (command output, files it reads, data it builds,
the names and metadata it gives them), the bundle that `capture` writes holds none of the secrets.

Each fake collector below emits one shape of secret through one capture path; the bundle is then
searched whole: every artifact's bytes (expanded from their compressed chunks) and every text column
of every table. With ``redact=False`` the same secrets must be found, which proves the search looks
in the right places."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from collectors.base import Artifact
from collectors.framework import registry
from workbench.capture.live import capture
from workbench.store.bundle import Bundle

HF = "hf_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB"
GHP = "ghp_" + "0123456789abcdefghijABCDEFGHIJklmnopqr"
AKIA = "AKIAIOSFODNN7EXAMPLE"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6ImpvYiJ9."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")

COMMAND_LINES = ("  PID CMD\n"
                 " 4242 python train.py --token s3cr3tvalue --lr 3e-4\n"
                 " 4243 vllm serve llama --api-key=sk-live-apikeyvalue1 --port 8000\n"
                 " 4244 mysql --password hunter2pass -h db\n")
ENV_DUMP = (f"HF_TOKEN={HF}\nWANDB_API_KEY=wandbkeyvalue0123456789\n"
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nNCCL_IB_HCA=mlx5_0\n")
URLS = ("scraping https://admin:pr0mPa55word@prometheus.internal:9090/api/v1/query\n"
        "git remote: https://deploy:g1tl4bPassw0rd@gitlab.internal/org/repo.git\n")
K8S_ENV = ('{"spec": {"containers": [{"name": "trainer", "env": [\n'
           '  {"name": "HF_TOKEN", "value": "k8shfsecretvalue"},\n'
           '  {"name": "DB_PASSWORD", "value": "k8sdbpassvalue"}\n'
           "]}]}}\n")
PROBED = ("PGPASSWORD=pgprobesecret1 psql -h db appdb\n"
          "notify https://hooks.slack.com/services/T000/B000/slackprobesecret2\n"
          "sshpass -p sshprobesecret3 ssh -p 2222 node07\n"
          "mysql -u root -pmysqlprobesecret4 appdb\n"
          "curl -u alice:curlprobesecret5 https://127.0.0.1/v1\n"
          "curl --user alice:curlprobesecret6 https://127.0.0.1/v1\n")
"""The shapes a probe found passing: PGPASSWORD inline, a Slack webhook, sshpass -p, mysql's attached
password (its next word, the database, must stay) and curl -u."""
BARE_TOKENS = (f"downloading with {HF} from the hub\n"
               f"cloned using {GHP}\n"
               f"aws configure list shows {AKIA}\n"
               f"websocket handshake carried {JWT}\n")

SECRETS = {
    "command_lines": ["s3cr3tvalue", "sk-live-apikeyvalue1", "hunter2pass"],
    "env_dump": [HF, "wandbkeyvalue0123456789", "wJalrXUtnFEMI/K7MDENG"],
    "urls": ["pr0mPa55word", "g1tl4bPassw0rd"],
    "k8s_env": ["k8shfsecretvalue", "k8sdbpassvalue"],
    "bare_tokens": [HF, GHP, AKIA, JWT],
    "probed": [f"{word}probesecret{n}" for n, word in enumerate(("pg", "slack", "ssh", "mysql", "curl", "curl"), 1)],
}


def _from_command(ctx):
    """A command's stdout through ``ctx.run``; the command line itself holds a secret too."""
    yield ctx.run(["printf", "%s", COMMAND_LINES + "launched with --token s3cr3tvalue\n"], kind="command_lines_text")


def _from_data(name: str, text: str):
    def collect(ctx):
        yield Artifact(source=f"{name}.txt", kind=f"{name}_text", data=text.encode(),
                       info={"origin": text.splitlines()[0]})
    return collect


def _from_file(path: Path):
    def collect(ctx):
        artifact = ctx.read_file(str(path), kind="k8s_env_text")
        if artifact is not None:
            yield artifact
        ctx.missing("https://admin:pr0mPa55word@prometheus.internal:9090", "unavailable: connection refused")
    return collect


def _module(name: str, capture_fn) -> types.ModuleType:
    module = types.ModuleType(f"fake_{name}")
    module.NAME = name
    module.LAYER = "host"
    module.KINDS = (f"{name}_text",)
    module.TIMEOUT = 20.0
    module.PRIORITY = 50
    module.capture = capture_fn
    module.parse = lambda kind, stream, ctx: iter(())
    return module


def _collectors(tmp_path: Path) -> dict[str, types.ModuleType]:
    pod = tmp_path / "pod.json"
    pod.write_text(K8S_ENV)
    return {
        "command_lines": _module("command_lines", _from_command),
        "env_dump": _module("env_dump", _from_data("env_dump", ENV_DUMP)),
        "urls": _module("urls", _from_data("urls", URLS)),
        "k8s_env": _module("k8s_env", _from_file(pod)),
        "bare_tokens": _module("bare_tokens", _from_data("bare_tokens", BARE_TOKENS)),
        "probed": _module("probed", _from_data("probed", PROBED)),
    }


def _stored_text(path: Path) -> str:
    """Everything the bundle stores as text: each artifact's raw bytes and every column of every table."""
    with Bundle.open(path) as bundle:
        parts = [b"".join(bundle.artifact_bytes(a["id"])).decode("utf-8", "replace") for a in bundle.artifacts()]
        tables = [r[0] for r in bundle.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()]
        for table in tables:
            if table == "artifact_chunk":
                continue
            for row in bundle.con.execute(f"SELECT * FROM {table}").fetchall():
                parts.extend(str(v) for v in row if v is not None)
    return "\n".join(parts)


def _run(tmp_path: Path, monkeypatch, names: list[str], redact: bool) -> str:
    modules = _collectors(tmp_path)
    monkeypatch.setattr(registry, "all_collectors", lambda: tuple(modules[n] for n in names))
    out = tmp_path / ("r.duckdb" if redact else "plain.duckdb")
    _, outcomes, _ = capture(out, redact=redact)
    assert all(o.status in ("ok", "partial") for o in outcomes), [(o.name, o.status, o.reason) for o in outcomes]
    return _stored_text(out)


@pytest.mark.parametrize("collector", sorted(SECRETS))
def test_captured_bundle_holds_no_secret(tmp_path, monkeypatch, collector):
    stored = _run(tmp_path, monkeypatch, [collector], redact=True)
    leaked = [s for s in SECRETS[collector] if s in stored]
    assert not leaked, f"{collector}: stored verbatim: {leaked}"
    assert "***REDACTED***" in stored


def test_without_redaction_the_same_search_finds_every_secret(tmp_path, monkeypatch):
    stored = _run(tmp_path, monkeypatch, sorted(SECRETS), redact=False)
    missing = [s for secrets in SECRETS.values() for s in secrets if s not in stored]
    assert not missing


def test_redaction_keeps_what_a_responder_needs(tmp_path, monkeypatch):
    stored = _run(tmp_path, monkeypatch, sorted(SECRETS), redact=True)
    for kept in ("HF_TOKEN=", "NCCL_IB_HCA=mlx5_0", "python train.py --token", "prometheus.internal:9090",
                 '"name": "HF_TOKEN"', "downloading with", "--port 8000", "-p***REDACTED*** appdb",
                 "ssh -p 2222 node07", "curl -u alice:", "hooks.slack.com/services/"):
        assert kept in stored, kept


def test_redacted_counts_are_recorded_per_artifact(tmp_path, monkeypatch):
    modules = _collectors(tmp_path)
    monkeypatch.setattr(registry, "all_collectors", lambda: (modules["bare_tokens"],))
    out, _, _ = capture(tmp_path / "b.duckdb")
    with Bundle.open(out) as bundle:
        (art,) = bundle.artifacts()
        assert '"redacted_values": 4' in art["info"]
        assert bundle.verify() == []
