#!/usr/bin/env bash
# One command from a fresh machine to a full test run: system packages, a virtual environment with the
# project and its test tools, the linter, then pytest (integration tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-deps.sh
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check workbench collectors playbooks rules tests scripts
exec .venv/bin/python -m pytest -q "$@"
