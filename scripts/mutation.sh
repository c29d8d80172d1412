#!/usr/bin/env bash
# Mutation testing of the modules that carry the project's promises (`make mutation`).
#
# For each module, mutmut makes small changes to its code (a flipped comparison, a dropped call, a
# changed constant) and runs that module's focused tests against each change: a change no test notices
# ("survived") is a promise nobody checks. Each module runs in its own scratch copy of the work tree, so
# the working copy is never touched, and only against its focused test files (and, for the big modules,
# only the functions that carry the promise), so that a run stays affordable on a small machine.
#
#   bash scripts/mutation.sh                 every module below (tens of minutes on 2 cores)
#   bash scripts/mutation.sh bundle redact   some of them
#   MUTATION_JOBS=4 bash scripts/mutation.sh more parallel test processes (default 2)
#   MUTATION_KEEP=1 ...                      keep the scratch copies (`mutmut show NAME` a survivor there)
#
# Prints per module: killed / (killed + survived) and the score; then the score without the survivors
# that only change the letter case inside a string (SQL keywords and identifiers are case-insensitive:
# such a mutant cannot change behaviour); mutants in functions the focused tests never call are counted
# apart ("not reached"). Survivors are listed under each module.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ROOT}/.venv/bin/python"
MUTMUT="${ROOT}/.venv/bin/mutmut"
JOBS="${MUTATION_JOBS:-2}"

if [[ ! -x "${MUTMUT}" ]]; then
    echo "mutation: ${MUTMUT} not found; install the test extra: .venv/bin/pip install -e '.[test]'" >&2
    exit 2
fi

# name | file to mutate | focused test files | mutant-name globs (empty: the whole file)
MODULES=(
    "seal|workbench/store/seal.py|tests/workbench/store/test_guarantees_seal.py tests/workbench/store/test_bundle.py|*ǁroot_digest__* *_root_digest_v1* *provenance_items* *ǁseal__* *ǁlast_seal* *x_artifact_label* *x_digest_of* *x__canonical*"
    "verify|workbench/store/verify.py|tests/workbench/store/test_guarantees_seal.py tests/workbench/store/test_bundle.py|*ǁverify__*"
    "artifacts|workbench/store/artifacts.py|tests/workbench/store/test_guarantees_seal.py tests/workbench/store/test_bundle.py|*add_alias* *ǁartifact_bytes*"
    "chunks|workbench/store/chunks.py|tests/workbench/store/test_guarantees_seal.py tests/workbench/store/test_bundle.py|*x__pack* *x_unpack*"
    "redact|collectors/framework/redact.py|tests/test_security.py tests/workbench/test_guarantees_redaction.py tests/workbench/test_guarantees_redaction_units.py|"
    "query|workbench/query/events.py|tests/workbench/query/test_guarantees_timeline_order.py tests/workbench/query/test_query_paging.py tests/workbench/query/test_timeline_filter.py|*EventFilter* *x_events__* *x_iter_events* *x_page* *x_cursor_at* *x_seek* *x_position* *x__exists* *x_event_json* *x__row*"
    "kernel_lines|collectors/framework/kernel_lines/nvidia.py|tests/collectors/test_guarantees_kernel_timeline.py tests/collectors/test_kernel.py|*NvidiaLinesǁ_xid* *NvidiaLinesǁ_nvrm* *NvidiaLinesǁ_new_fall*"
    "kernel_dispatch|collectors/framework/kernel_lines/__init__.py|tests/collectors/test_guarantees_kernel_timeline.py tests/collectors/test_kernel.py|*Classifierǁhandle*"
    "hypotheses|workbench/analysis/hypotheses.py|tests/workbench/analysis/test_analysis.py tests/workbench/analysis/test_thin_evidence.py|"
)

wanted=("$@")
for spec in "${MODULES[@]}"; do
    IFS='|' read -r name file tests globs <<<"${spec}"
    if [[ ${#wanted[@]} -gt 0 && ! " ${wanted[*]} " =~ " ${name} " ]]; then
        continue
    fi
    present=()
    for t in ${tests}; do
        [[ -f "${ROOT}/${t}" ]] && present+=("${t}")
    done
    if [[ ! -f "${ROOT}/${file}" || ${#present[@]} -eq 0 ]]; then
        echo "${name}: skipped (${file} or its tests are missing)"
        continue
    fi
    work="$(mktemp -d -t "gpuwb-mutation-${name}-XXXX")"
    (cd "${ROOT}" && tar --exclude=.venv --exclude=.git --exclude=.hypothesis --exclude=__pycache__ \
        --exclude='*.egg-info' --exclude=mutants --exclude=.pytest_cache -cf - .) | tar -xf - -C "${work}"
    package="${file%%/*}"
    # the project's pyproject.toml has no [tool.mutmut] section, so mutmut reads this setup.cfg
    {
        echo "[mutmut]"
        echo "source_paths = ${package}"
        echo "only_mutate = ${file}"
        echo "also_copy ="
        for p in workbench collectors playbooks; do [[ "${p}" != "${package}" ]] && echo "    ${p}"; done
        echo "pytest_add_cli_args_test_selection ="
        for t in "${present[@]}"; do echo "    ${t}"; done
        echo "pytest_add_cli_args = -p no:cacheprovider -q -x"
    } >"${work}/setup.cfg"
    began=$(date +%s)
    read -r -a selection <<<"${globs}"
    if ! (cd "${work}" && "${MUTMUT}" run --max-children "${JOBS}" "${selection[@]}" >"${work}/run.log" 2>&1); then
        echo "${name}: mutmut failed, see ${work}/run.log" >&2
        tail -20 "${work}/run.log" >&2
        exit 1
    fi
    (cd "${work}" && "${MUTMUT}" results --all true >"${work}/results.txt" 2>/dev/null)
    (cd "${work}" && "${PY}" - "${name}" "${file}" "$(( $(date +%s) - began ))" "${MUTMUT}" "${selection[@]}" <<'EOF'
import fnmatch
import subprocess
import sys

name, file, seconds, mutmut, *globs = sys.argv[1:]
status = {}
for line in open("results.txt"):
    key, sep, value = line.strip().rpartition(": ")
    if sep and (not globs or any(fnmatch.fnmatch(key, g) for g in globs)):
        status[key] = value
killed = [k for k, v in status.items() if v in ("killed", "timeout", "segfault", "caught by type check")]
survived = sorted(k for k, v in status.items() if v == "survived")
unreached = [k for k, v in status.items() if v == "no tests"]


def case_only(mutant: str) -> bool:
    """The mutant only changes letter case inside a string literal (SQL is case-insensitive)."""
    shown = subprocess.run([mutmut, "show", mutant], capture_output=True, text=True).stdout.splitlines()
    old = [line[1:] for line in shown if line.startswith("-") and not line.startswith("---")]
    new = [line[1:] for line in shown if line.startswith("+") and not line.startswith("+++")]
    return bool(old) and old != new and [x.lower() for x in old] == [x.lower() for x in new]


equivalent = [m for m in survived if case_only(m)]
tried = len(killed) + len(survived)
score = 100 * len(killed) / max(1, tried)
real = 100 * len(killed) / max(1, tried - len(equivalent))
print(f"{name}: {len(killed)} killed / {tried} mutants = {score:.1f} %; {real:.1f} % without "
      f"{len(equivalent)} case-only string survivors; {len(unreached)} not reached by its tests "
      f"({file}, {seconds} s)")
for mutant in survived:
    if mutant not in equivalent:
        print(f"    survived: {mutant}")
EOF
    )
    if [[ -z "${MUTATION_KEEP:-}" ]]; then
        rm -rf "${work}"
    else
        echo "    kept ${work}"
    fi
done
