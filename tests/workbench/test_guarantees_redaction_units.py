"""Redaction, exactly: the scrubbed bytes and the count, across many lines and after a header was masked.

Written against the mutants that survived `make mutation` on collectors/framework/redact.py: the name-led
patterns run only on spans of lines near a hint word, so a span computed one byte or one line off
lets a secret through while the single-line tests still pass."""

from __future__ import annotations

import pytest

from collectors.framework.redact import MASK, RULES, redact_argv, redact_bytes, redact_env, secret_name
from tests.conftest import ROOT

M = MASK.encode()


def test_quotes_are_kept_around_the_mask():
    assert redact_bytes(b"DB_PASSWORD='pass with spaces' X=1") == (b"DB_PASSWORD='" + M + b"' X=1", 1)
    assert redact_bytes(b'API_TOKEN="abc def" Y=2') == (b'API_TOKEN="' + M + b'" Y=2', 1)
    assert redact_bytes(b'PASSWORD=""') == (b'PASSWORD="' + M + b'"', 1)
    assert redact_bytes(b"A_TOKEN=abca") == (b"A_TOKEN=" + M, 1)


def test_every_masked_value_is_counted_once():
    assert redact_bytes(b"A_TOKEN=x B_TOKEN=y C=z") == (b"A_TOKEN=" + M + b" B_TOKEN=" + M + b" C=z", 2)
    assert redact_bytes(b'{"password": "hunter2", "apiKey": "k-9", "user": "bob"}') == (
        b'{"password": "' + M + b'", "apiKey": "' + M + b'", "user": "bob"}', 2)


def test_a_secret_inside_another_options_value():
    assert redact_bytes(b"srun --export=ALL,HF_TOKEN=hf_inner_secret python x.py") == (
        b"srun --export=ALL,HF_TOKEN=" + M + b" python x.py", 1)
    assert redact_bytes(b"A_TOKEN=z SSH_AUTH_SOCK=HF_TOKEN=abc") == (
        b"A_TOKEN=" + M + b" SSH_AUTH_SOCK=HF_TOKEN=" + M, 2)


def test_secrets_on_many_lines_far_apart():
    lines = [b"preamble without hints"] + [b"line %d plain" % n for n in range(40)]
    lines[1] = b"export HF_TOKEN=first_secret"
    lines[2] = b"export WANDB_API_KEY=second_secret"
    lines[20] = b"export HF_TOKEN=third_secret"
    lines[30] = b"export HF_TOKEN=fifth_secret"
    lines[39] = b"mysql --password=fourth_secret"
    out, count = redact_bytes(b"\n".join(lines) + b"\n")
    expected = list(lines)
    expected[1] = b"export HF_TOKEN=" + M
    expected[2] = b"export WANDB_API_KEY=" + M
    expected[20] = b"export HF_TOKEN=" + M
    expected[30] = b"export HF_TOKEN=" + M
    expected[39] = b"mysql --password=" + M
    assert (out, count) == (b"\n".join(expected) + b"\n", 5)


def test_a_masked_header_does_not_shift_the_lines_below():
    text = (b"curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789'\n" + b"plain line\n" * 6
            + b"DB_PASSWORD=hunter2\n")
    out, count = redact_bytes(text)
    assert out == (b"curl -H 'Authorization: Bearer " + M + b"'\n" + b"plain line\n" * 6 + b"DB_PASSWORD=" + M + b"\n")
    assert count == 2


def test_a_kubernetes_env_entry_over_several_lines():
    text = b'"env": [\n  {\n    "name": "HF_TOKEN",\n    "value": "hf_in_a_pod_spec"\n  }\n]\n'
    assert redact_bytes(text) == (text.replace(b"hf_in_a_pod_spec", M), 1)


def test_environment_values_that_are_not_utf8_are_scrubbed_not_fatal():
    env = redact_env({"LAUNCH": "torchrun --token s3cr3t caf\udce9", "HF_TOKEN": "x"})
    assert env["HF_TOKEN"] == MASK
    assert env["LAUNCH"].startswith(f"torchrun --token {MASK} caf")


def test_names_without_words_are_not_secrets():
    assert secret_name("") is False and secret_name("--") is False and secret_name("_") is False


# -- one example per rule: each shape of collectors/framework/redact.py's RULES, masked exactly ----------------

EXAMPLES = {
    "PEM private key block": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1xq2\nw3e4r5t6y7u8\n-----END RSA PRIVATE KEY-----\n",
        "-----BEGIN RSA PRIVATE KEY-----\n<M>\n-----END RSA PRIVATE KEY-----\n"),
    "Authorization: SCHEME credentials": (
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260603/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024",
        "Authorization: AWS4-HMAC-SHA256 <M>"),
    "X-Api-Key: and other key headers": (
        "curl -H 'X-Api-Key: k3yvalue' -H 'PRIVATE-TOKEN: glvalue9' https://127.0.0.1",
        "curl -H 'X-Api-Key: <M>' -H 'PRIVATE-TOKEN: <M>' https://127.0.0.1"),
    "Cookie: / Set-Cookie:": ("Cookie: session=abc123; theme=dark\nSet-Cookie: sid=q9; Path=/; HttpOnly\n",
                              "Cookie: <M>\nSet-Cookie: <M>\n"),
    "Bearer TOKEN": ("retrying with bearer abcdefgh12345678 after 401", "retrying with bearer <M> after 401"),
    "mysql -pSECRET (mysqldump, mariadb, ...)": (
        "mysql -u root -pS3cret appdb; /usr/bin/mysqldump -uroot -p'two words' db | mariadb -pX9",
        "mysql -u root -p<M> appdb; /usr/bin/mysqldump -uroot -p'<M>' db | mariadb -p<M>"),
    "sshpass -p SECRET": ("sshpass -p s3cret ssh root@node07 && sshpass -P assword -pOther1 scp a b",
                          "sshpass -p <M> ssh root@node07 && sshpass -P assword -p<M> scp a b"),
    "curl -u USER:SECRET, --user, --proxy-user": (
        "curl -u alice:s3cr:et https://127.0.0.1; curl -s --user=bob:pw2 -U 'proxy:pw3' https://localhost",
        "curl -u alice:<M> https://127.0.0.1; curl -s --user=bob:<M> -U 'proxy:<M>' https://localhost"),
    "redis-cli -a SECRET": ("redis-cli -h cache -a s3cret ping", "redis-cli -h cache -a <M> ping"),
    "ipmitool -P SECRET": ("ipmitool -I lanplus -H bmc07 -U admin -P s3cret sel elist",
                           "ipmitool -I lanplus -H bmc07 -U admin -P <M> sel elist"),
    "ldapsearch -w SECRET (ldapmodify, ...)": ("ldapsearch -x -D cn=admin,dc=example -w s3cret -b dc=example",
                                               "ldapsearch -x -D cn=admin,dc=example -w <M> -b dc=example"),
    "mongo -p SECRET (mongosh, mongodump, ...)": ("mongodump --port 27017 -u admin -p s3cret",
                                                  "mongodump --port 27017 -u admin -p <M>"),
    "docker login -p SECRET (podman, helm registry, ...)": ("docker login -u me -p s3cret nvcr.io",
                                                            "docker login -u me -p <M> nvcr.io"),
    "openssl -passin pass:SECRET": ("openssl rsa -in k.pem -passin pass:s3cret -out k2.pem",
                                    "openssl rsa -in k.pem -passin pass:<M> -out k2.pem"),
    "netrc: login USER password SECRET": ("machine api.example.com\n  login bob\n  password s3cret\n",
                                          "machine api.example.com\n  login bob\n  password <M>\n"),
    "requirepass / masterauth / bindpw / rootpw SECRET (config files)": (
        "# requirepass foobared\nrequirepass s3cret\nbindpw  ldap pw \n",
        "# requirepass foobared\nrequirepass <M>\nbindpw  <M> \n"),
    "Kubernetes env entry (JSON)": ('{"name": "HF_TOKEN", "value": "hf-in-a-pod"}',
                                    '{"name": "HF_TOKEN", "value": "<M>"}'),
    "Kubernetes env entry (YAML)": ("    - name: WANDB_API_KEY\n      value: wandb-in-yaml\n",
                                    "    - name: WANDB_API_KEY\n      value: <M>\n"),
    '"NAME": "SECRET" (JSON, and JSON inside a JSON string)': (
        '{"PGPASSWORD": "pg1", "user": "bob"}\n{"log":"{\\"apiKey\\": \\"k-9\\", \\"n\\": 1}\\n","stream":"stdout"}',
        '{"PGPASSWORD": "<M>", "user": "bob"}\n{"log":"{\\"apiKey\\": \\"<M>\\", \\"n\\": 1}\\n","stream":"stdout"}'),
    "'NAME': 'SECRET' (a printed Python dict, os.environ)": (
        "environ({'HF_TOKEN': 'hf-in-repr', 'RANK': '0'})", "environ({'HF_TOKEN': '<M>', 'RANK': '0'})"),
    "NAME: SECRET (YAML, kubectl describe)": ("      HF_TOKEN:   hf-in-describe\n      RANK:       0\n",
                                              "      HF_TOKEN:   <M>\n      RANK:       0\n"),
    "NAME = SECRET (INI, TOML, ~/.aws/credentials)": (
        "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = wJalr/K7MDENG+bPxRfiCY \n",
        "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = <M> \n"),
    "--NAME SECRET, --NAME=SECRET, -NAME SECRET": (
        "vllm serve m --api-key s3cret --hf-token=hf,with,commas -password go1 --port 8000",
        "vllm serve m --api-key <M> --hf-token=<M> -password <M> --port 8000"),
    "NAME=SECRET (environment, export, inline PGPASSWORD=x psql, query string)": (
        "PGPASSWORD=pg1 psql -h db; GET /v1?apikey=k9&page=2; SSHPASS=s1 sshpass -e ssh h",
        "PGPASSWORD=<M> psql -h db; GET /v1?apikey=<M>&page=2; SSHPASS=<M> sshpass -e ssh h"),
    "scheme://USER:SECRET@host": ("redis://:s3cret@cache:6379/0 and https://deploy:tok9@git.example/x.git",
                                  "redis://:<M>@cache:6379/0 and https://deploy:<M>@git.example/x.git"),
    "webhook URL (Slack, Discord, Teams)": (
        "POST https://hooks.slack.com/services/T0001/B0002/XXXXslack failed; https://discord.com/api/webhooks/12/tok",
        "POST https://hooks.slack.com/services/<M> failed; https://discord.com/api/webhooks/<M>"),
    "signed URL ?sig=, X-Amz-Signature=": (
        "GET /c/b.bin?sv=2022-11-02&se=2026&sig=abc%2Bdef%3D&sp=r; ?X-Amz-Date=1&X-Amz-Signature=f00d",
        "GET /c/b.bin?sv=2022-11-02&se=2026&sig=<M>&sp=r; ?X-Amz-Date=1&X-Amz-Signature=<M>"),
    "GitHub token ghp_…, github_pat_…": ("push with ghp_" + "a1" * 18 + " ok", "push with <M> ok"),
    "GitLab token glpat-…": ("glpat-" + "x9" * 10, "<M>"),
    "Slack token xoxb-…, xapp-…": ("xoxb-1234-5678-abcdefghij and xapp-1-A0123-456789abcdef", "<M> and <M>"),
    "Hugging Face token hf_…": ("hf_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB", "<M>"),
    "OpenAI / Anthropic key sk-…, Stripe sk_live_…": (
        "sk-proj-" + "Q" * 24 + " sk-ant-api03-" + "z" * 24 + " sk_live_" + "4" * 24, "<M> <M> <M>"),
    "NVIDIA API key nvapi-…": ("nvapi-" + "Nv" * 16, "<M>"),
    "npm token npm_…": ("npm_" + "a" * 36, "<M>"),
    "PyPI token pypi-AgE…": ("pypi-AgEIcHlwaS5vcmc" + "b" * 30, "<M>"),
    "Docker Hub token dckr_pat_…": ("dckr_pat_" + "c" * 27, "<M>"),
    "AWS key id AKIA…, ASIA…, Google API key AIza…": (
        "AKIAIOSFODNN7EXAMPLE ASIAIOSFODNN7EXAMPLE AIza" + "S" * 35, "<M> <M> <M>"),
    "Google OAuth token ya29.…": ("ya29.a0AfH6SMB" + "d" * 20, "<M>"),
    "JWT eyJ….eyJ….…": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fw", "<M>"),
}
"""For each rule, a line in its shape and the line redacted, ``<M>`` standing for the mask."""


def test_every_rule_has_an_example():
    assert set(EXAMPLES) == {rule.shape for rule in RULES}


@pytest.mark.parametrize("shape", sorted(EXAMPLES))
def test_each_shape_is_masked_exactly(shape):
    text, expected = EXAMPLES[shape]
    out, count = redact_bytes(text.encode())
    assert out.decode() == expected.replace("<M>", MASK)
    assert count == expected.count("<M>")


def test_each_rule_masks_its_own_example():
    """No example passes only thanks to another rule: each rule's pattern finds something in its own."""
    for rule in RULES:
        text = EXAMPLES[rule.shape][0].encode()
        assert rule.pattern.search(text) and (rule.command is None or rule.command.search(text)), rule.shape


def test_every_shape_is_listed_in_the_docs():
    page = (ROOT / "docs" / "data-flow.md").read_text(encoding="utf-8")
    assert [rule.shape for rule in RULES if rule.shape not in page] == []


KEPT = [
    "ssh -p 2222 node07", "docker run -p 8080:80 nginx", "perfquery -x -C mlx5_0 -P 1", "sacct -P -a -D", "df -P -T",
    "mysql -u root -p", "mysql -u root -p -h db", "mysqladmin --port=3306 -p status", "curl -u alice https://127.0.0.1",
    "curl -s --user-agent a:b http://127.0.0.1:8080/metrics", "redis-cli -h 127.0.0.1 ping", "ipmitool sel elist",
    "ldapsearch -x -W -b dc=x", "docker login nvcr.io", "/bin/login -p --", "sshpass -f /etc/pw ssh -p 2222 host",
    "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Sending cookies.  Check SNMP counters.",
    "signal 9; sig=15", "http://host:9090/api/v1/query?query=up&time=1", "ssh://git@host:22/repo.git",
    "https://hooks.example.com/x", "Failed password for root from 10.0.0.1 port 22 ssh2",
    "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= rhost=10.0.0.1  user=root",
    "PasswordAuthentication no", "---------------Inter-Token Latency----------------",
    "NVRM: Xid (PCI:0000:19:00): 79, pid=1234, GPU has fallen off the bus.",
    "0000:3b:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 GPU-509665ad-b600-ac93-3616-d754b23d636d",
    "skylake-avx512 hf_hub_download sk-short AKIA-short xoxo eyJshort disk-by-id",
    "MASTER_PORT=29500 NCCL_IB_PKEY=0x8001 OLDPWD=/tmp PWD=/x PGPASSFILE=/home/u/.pgpass",
]


@pytest.mark.parametrize("text", KEPT)
def test_evidence_that_only_looks_like_a_secret_is_kept(text):
    assert redact_bytes(text.encode()) == (text.encode(), 0)


@pytest.mark.parametrize("name, secret", [
    ("PGPASSWORD", True), ("SSHPASS", True), ("REDISCLI_AUTH", True), ("DB_ROOTPASSWORD", True),
    ("SLACK_BOT_TOKEN", True), ("OPENAI_KEY", True), ("IPMI_PASSWORD", True),
    ("PGPASSFILE", False), ("BYPASS", False), ("OLDPWD", False), ("MAX_TOKENS", False), ("SORT_KEY", False)])
def test_secret_names_beyond_the_last_word(name, secret):
    assert secret_name(name) is secret


def test_a_secret_in_a_nul_separated_command_line():
    argv = ["mysql", "-u", "root", "-pS3cret", "--password", "P2", "sshpass", "-p", "P3"]
    out, count = redact_bytes("\x00".join(argv).encode())
    assert out.split(b"\x00") == [b"mysql", b"-u", b"root", b"-p" + M, b"--password", M, b"sshpass", b"-p", M]
    assert count == 3


def test_redact_argv_judges_the_words_together():
    assert redact_argv(["curl", "-u", "alice:pw1", "--token", "t2", "https://127.0.0.1"]) == [
        "curl", "-u", "alice:" + MASK, "--token", MASK, "https://127.0.0.1"]
