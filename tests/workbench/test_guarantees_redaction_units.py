"""Redaction, exactly: the scrubbed bytes and the count, across many lines and after a header was masked.

Written against the mutants that survived `make mutation` on collectors/_redact.py: the name-led
patterns run only on spans of lines near a hint word, so a span computed one byte or one line off
lets a secret through while the single-line tests still pass."""

from __future__ import annotations

from collectors._redact import MASK, redact_bytes, redact_env, secret_name

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
