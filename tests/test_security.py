"""Security properties: no shell, hostile evidence stays data (SQL, HTML, Markdown, file names), and
secrets are masked at capture without hiding the settings a responder needs."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import html5lib
import pytest

from collectors.framework.redact import MASK, redact_bytes, redact_env, secret_name
from tests.conftest import ROOT, run_cli
from workbench.store import journal
from workbench.store.bundle import Bundle

SOURCE_DIRS = ("workbench", "collectors", "playbooks", "rules")


def _python_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))


def _call_name(node: ast.Call) -> str:
    func = node.func
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def test_no_shell_anywhere():
    """Commands are argv lists: no shell=True, os.system, os.popen, or a command string handed to subprocess."""
    offences = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if name in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"):
                offences.append(f"{where} {name}")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    offences.append(f"{where} shell=")
            if name.startswith("subprocess.") and node.args and isinstance(node.args[0], (ast.JoinedStr, ast.BinOp)):
                offences.append(f"{where} {name} with a command string")
    assert offences == []


# -- hostile values stay values -------------------------------------------------------------------

HOSTILE = "</script><img src=x onerror=alert(1)>"
HOSTILE_HOST = "<svg/onload=alert(2)>"
HOSTILE_JOB = "<img src=x onerror=alert(3)>"
HOSTILE_MODEL = "<iframe src=//evil.example>"
QUOTES = "x'); DROP TABLE event; --\"'"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An incident whose evidence, host names, job name, metric labels, title and journal carry markup."""
    root = tmp_path_factory.mktemp("hostile")
    evidence = root / "evidence"
    (evidence / "node01").mkdir(parents=True)
    (evidence / "slurm").mkdir()
    (evidence / "metrics").mkdir()
    (evidence / "node01" / "kern.log").write_text(
        f"2026-06-03T14:00:00+00:00 {HOSTILE_HOST} kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1, "
        f"name={HOSTILE}, GPU has fallen off the bus.\n"
        f"2026-06-03T14:00:02+00:00 {HOSTILE_HOST} kernel: Out of memory: Killed process 4242 ({HOSTILE}) "
        "total-vm:1kB\n")
    (evidence / "slurm" / "sacct.txt").write_text(
        "JobID|JobName|NodeList|State|ExitCode|Start|End\n"
        f"4821|{HOSTILE_JOB}|node01|FAILED|1:0|2026-06-03T13:00:00|2026-06-03T14:00:05\n")
    for i in range(10):
        label = f'model_name="{HOSTILE_MODEL}"'
        (evidence / "metrics" / f"pod-202606031{350 + i}00Z.prom").write_text(
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{label}}} {i * i * 10}\n")
    bundle = root / "hostile.duckdb"
    code, out, err = run_cli("ingest", bundle, evidence, "--title", f"<script>alert('title')</script>{QUOTES}")
    assert code == 0, err or out
    with Bundle.open(bundle, write=True) as b:
        journal.add_note(b, f"oncall{HOSTILE}", f"note {HOSTILE}")
        journal.add_action_item(b, "oncall", f"action {HOSTILE}", owner=f"owner{HOSTILE}")
        journal.set_summary(b, "oncall", f"summary {HOSTILE}")
        journal.add_retro(b, "oncall", "wrong", f"retro {HOSTILE}")
    return bundle


def _dom_offences(html: str) -> list[str]:
    """Elements and attributes that would run or load something."""
    bad = []
    for el in html5lib.parse(html, namespaceHTMLElements=False).iter():
        tag = el.tag.rsplit("}", 1)[-1] if isinstance(el.tag, str) else ""
        if tag in ("script", "img", "iframe", "object", "embed", "link", "base", "form"):
            bad.append(f"<{tag}>")
        for attr, value in el.attrib.items():
            name = attr.rsplit("}", 1)[-1].lower()
            if name.startswith("on"):
                bad.append(f"{tag} {name}=")
            if name in ("src", "href", "xlink:href", "action") and not value.startswith("#"):
                bad.append(f"{tag} {name}={value}")
    return bad


def test_html_report_escapes_hostile_evidence_everywhere(hostile, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = run_cli("report", hostile, "-o", out)
    assert code == 0, err
    html = out.read_text()
    assert _dom_offences(html) == []
    for raw in (HOSTILE, HOSTILE_HOST, HOSTILE_JOB, "<script>alert('title')</script>"):
        assert raw not in html
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html  # shown, as text
    assert "&lt;svg/onload=alert(2)&gt;" in html  # the host, in the tables and the chart's lane labels
    assert html.count("&lt;svg/onload=alert(2)&gt;") >= 3
    svg_texts = [el.text or "" for el in html5lib.parse(html, namespaceHTMLElements=False).iter()
                 if isinstance(el.tag, str) and el.tag.endswith("text")]
    assert any(HOSTILE_HOST in t for t in svg_texts)  # the parsed SVG text is the literal host name
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}


def test_markdown_report_keeps_hostile_evidence_inert(hostile, tmp_path):
    from markdown_it import MarkdownIt

    out = tmp_path / "r.md"
    code, _, err = run_cli("report", hostile, "-o", out)
    assert code == 0, err
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(out.read_text())
    assert _dom_offences(rendered) == []
    assert "onerror=alert(1)" in rendered  # still there, as text


def test_json_outputs_carry_hostile_text_verbatim(hostile):
    code, out, _ = run_cli("timeline", hostile, "--json", "--kind", "xid")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and events and all(e["host"] == HOSTILE_HOST and HOSTILE in e["message"] for e in events)


@pytest.mark.parametrize("option", ["--host", "--kind", "--source", "--grep", "--severity"])
def test_timeline_filters_are_values_not_sql(option, hostile):
    code, out, err = run_cli("timeline", hostile, option, QUOTES)
    assert code == 0 and out == "", err
    code, out, _ = run_cli("timeline", hostile, "--host", HOSTILE_HOST, "--grep", "%")
    assert code == 0 and out.count("\n") >= 2  # the hostile host matches itself, literally
    code, out, _ = run_cli("verify", hostile)
    assert code == 0


def test_export_and_merge_take_paths_with_quotes(hostile, tmp_path):
    folder = tmp_path / "it's an \"export\"; DROP TABLE x"
    code, out, err = run_cli("export", hostile, "--parquet", folder)
    assert code == 0, err
    assert any(folder.rglob("*.parquet"))
    odd = tmp_path / "node's \"bundle\".duckdb"
    odd.write_bytes(hostile.read_bytes())
    merged = tmp_path / "merged'.duckdb"
    code, _, err = run_cli("merge", merged, odd)
    assert code == 0, err
    code, out, _ = run_cli("verify", merged)
    assert code == 0, out


def test_hostile_host_never_becomes_a_path(hostile, tmp_path):
    """A host called ``../../x`` is a partition value, escaped by DuckDB, not a folder outside."""
    evidence = tmp_path / "e"
    evidence.mkdir()
    (evidence / "kern.log").write_text("2026-06-03T14:00:00+00:00 ../../../escaped kernel: NVRM: Xid "
                                       "(PCI:0000:19:00): 79, pid=1, GPU has fallen off the bus.\n")
    bundle = tmp_path / "b.duckdb"
    assert run_cli("ingest", bundle, evidence)[0] == 0
    out = tmp_path / "deep" / "er" / "export"
    code, _, err = run_cli("export", bundle, "--parquet", out)
    assert code == 0, err
    written = list(tmp_path.rglob("*.parquet"))
    assert written and all(out in p.parents for p in written)


# -- redaction ------------------------------------------------------------------------------------

MASKED = [
    ("python train.py --password=hunter2 --port 8080", "hunter2"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("export AWS_SESSION_TOKEN=FQoGZXIvYXdzEXAMPLE", "FQoGZXIvYXdzEXAMPLE"),
    ("aws configure: AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "eyJhbGciOiJIUzI1NiJ9"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNz' -H 'X-Api-Key: k3y'", "dXNlcjpwYXNz"),
    ("curl -H 'X-Api-Key: abc123secret' http://127.0.0.1", "abc123secret"),
    ("git clone https://user:s3cr3t@github.com/org/repo", "s3cr3t"),
    ("git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/org/repo", "ghp_abcdefghij"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "hf_abcdefghij"),
    ("HUGGING_FACE_HUB_TOKEN=hf_xyz WANDB_API_KEY=0123456789abcdef", "0123456789abcdef"),
    ("MYSQL_PWD=hunter2", "hunter2"),
    ("DB_PASSWORD='pass with spaces'", "with spaces"),
    ("torchrun --token s3cr3tvalue train.py", "s3cr3tvalue"),
    ("vllm serve m --api-key=sk-live-123456", "sk-live-123456"),
    ("srun --export=ALL,HF_TOKEN=hf_inner_secret python x.py", "hf_inner_secret"),
    ('{"password": "hunter2", "apiKey": "k-9"}', "hunter2"),
    ('{"password": "hunter2", "apiKey": "k-9"}', "k-9"),
    ('"env": [\n  {\n    "name": "HF_TOKEN",\n    "value": "hf_in_a_pod_spec"\n  }\n]', "hf_in_a_pod_spec"),
    ("    env:\n    - name: WANDB_API_KEY\n      value: wandb-in-yaml\n", "wandb-in-yaml"),
    ("  password: hunter2\n", "hunter2"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
     "b3BlbnNzaC1rZXktdjEAAAAA"),
    ("notify xoxb-123456789012-1234567890123-abcdefghijABCD", "xoxb-1234"),
]

KEPT = [
    "NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_IB_GID_INDEX=3 NCCL_IB_TIMEOUT=22 NCCL_IB_PKEY=0x8001 NCCL_SOCKET_IFNAME=eth0",
    "CUDA_VISIBLE_DEVICES=0,1 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 PWD=/home/u OLDPWD=/tmp",
    "SSH_AUTH_SOCK=/tmp/ssh-agent.sock TOKENIZERS_PARALLELISM=false AUTHOR=bob",
    "mysql -u root -p 3306 -h db; torchrun --nproc-per-node 8 -p 29500",
    "SamplingParams(n=1, max_tokens=16, prompt_token_ids=[1, 2]) max_tokens=512 num_tokens=8",
    "Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 28.5 tokens/s",
    "mlx5_core 0000:3b:00.0: key=0x1234 port 1 link up; sort --key=2; --keyfile /etc/munge/munge.key",
    "--password-file=/run/secrets/db --no-password-prompt --token-path /var/run/token",
    "BYPASS_CACHE=1 COMPASS_DIR=/opt passenger=1 KEYTAB=/etc/krb5.keytab",
    "NVRM: Xid (PCI:0000:19:00): 79, pid=1234, GPU has fallen off the bus.",
    "https://prometheus.example:9090/api/v1/query_range?query=up",
]


@pytest.mark.parametrize("text, secret", MASKED, ids=[m[1][:20] for m in MASKED])
def test_secrets_are_masked(text, secret):
    out, count = redact_bytes(text.encode())
    assert secret.encode() not in out and MASK.encode() in out and count >= 1


@pytest.mark.parametrize("text", KEPT, ids=[k[:30] for k in KEPT])
def test_settings_a_responder_needs_stay_visible(text):
    out, count = redact_bytes(text.encode())
    assert (out.decode(), count) == (text, 0)


def test_names_stay_visible_and_redaction_is_idempotent():
    once, _ = redact_bytes(b"HF_TOKEN=hf_abcdef Authorization: Bearer abcdefgh12345")
    assert once == b"HF_TOKEN=***REDACTED*** Authorization: Bearer ***REDACTED***"
    assert redact_bytes(once) == (once, 0)


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("WANDB_API_KEY", True), ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True),
    ("MYSQL_PWD", True), ("apiKey", True), ("clientSecret", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
    ("NCCL_IB_PKEY", False), ("NCCL_IB_HCA", False), ("MAX_TOKENS", False), ("TOKENIZERS_PARALLELISM", False),
    ("SSH_AUTH_SOCK", False), ("PWD", False), ("AUTHOR", False), ("HOTKEY", False), ("key", False),
    ("PASSWORD_FILE", False), ("HF_TOKEN_PATH", False)])
def test_secret_names(name, secret):
    assert secret_name(name) is secret


def test_environment_redaction():
    env = redact_env({"HF_TOKEN": "hf_x", "NCCL_IB_PKEY": "0x8001", "TOKENIZERS_PARALLELISM": "false",
                      "LAUNCH": "torchrun --token s3cr3t train.py"})
    assert env == {"HF_TOKEN": MASK, "NCCL_IB_PKEY": "0x8001", "TOKENIZERS_PARALLELISM": "false",
                   "LAUNCH": f"torchrun --token {MASK} train.py"}


def test_captured_bundle_is_readable_by_its_owner_only(tmp_path):
    out = tmp_path / "capture.duckdb"
    code, _, err = run_cli("capture", "-o", out, "--only", "host")
    assert code == 0, err
    assert out.stat().st_mode & 0o777 == 0o600


# -- terminal output ------------------------------------------------------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m"


@pytest.fixture(scope="module")
def escapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("esc")
    name = folder / "kern\x1b[2J.log"
    name.write_text(f"2026-06-03T14:00:00+00:00 node07 kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1, {ESCAPES} "
                    "GPU has fallen off the bus.\n")
    bundle = folder / "esc.duckdb"
    code, out, err = run_cli("ingest", bundle, name)
    assert code == 0, err
    assert "\x1b" not in out  # the file name in the summary table
    return bundle


@pytest.mark.parametrize("command", [("timeline",), ("analyze",), ("report",), ("report", "-f", "html"),
                                     ("verify",)], ids=" ".join)
def test_escape_sequences_in_evidence_never_reach_the_terminal(command, escapes):
    code, out, err = run_cli(command[0], escapes, *command[1:])
    assert code == 0, err
    assert not any(c in out + err for c in ("\x1b", "\x07", "\x9b"))
    if command == ("timeline",):
        assert "\\x1b]0;owned\\x07" in out  # shown, as text


def test_escape_sequences_survive_in_json_as_escapes(escapes):
    code, out, _ = run_cli("timeline", escapes, "--json", "--kind", "xid")
    assert code == 0 and "\x1b" not in out
    assert ESCAPES in json.loads(out.splitlines()[0])["message"]  # the evidence itself is unchanged


def test_capture_provenance_is_scrubbed_too(tmp_path):
    """Coverage reasons and artifact metadata are stored beside the bytes; a secret there is masked too."""
    from collectors.base import Artifact
    from workbench.capture.live_context import LiveContext

    ctx = LiveContext(tmp_path, "node01", None, {}, True)
    ctx.missing("http://scraper:s3cr3t@prom:9090/metrics", "HTTP 401 Unauthorized")
    ctx.emit(Artifact(source="env HF_TOKEN=hf_leak", kind="unknown", data=b"x", info={"cmd": "--token abc123"}))
    manifest = (tmp_path / "manifest.jsonl").read_text()
    assert "s3cr3t" not in manifest and "hf_leak" not in manifest and "abc123" not in manifest
    assert [json.loads(line) for line in manifest.splitlines()][0]["missing"] == f"http://scraper:{MASK}@prom:9090/metrics"
