#!/usr/bin/env bash
# One command from a fresh machine to the main job: install into .venv, then capture this host.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e .
mkdir -p out
exec .venv/bin/gpuwb capture -o "out/incident-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ).duckdb" "$@"
