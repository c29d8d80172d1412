#!/usr/bin/env bash
# One command from a fresh machine to the main job: install into .venv, then `gpuwb demo`, which
# writes two realistic incidents as raw evidence files, ingests them, prints the analysis and
# writes the Markdown and HTML postmortems (paths printed at the end). Extra arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e .
exec .venv/bin/gpuwb demo "$@"
