#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/slurm-epilog-gpuwb.sh): when a job ends badly, every node
# it ran on freezes its own evidence with `gpuwb capture --safe` into a shared folder, before the next
# job lands there. slurmd runs it as root on each node of the job at job end, with no PATH and only
# Slurm's variables (SLURM_JOB_ID, SLURM_JOB_EXIT_CODE, SLURMD_NODENAME, SLURM_CONF).
#
# Settings: gpuwb-epilog.conf beside this script (shell assignments), e.g.
#   GPUWB=/opt/gpuwb/bin/gpuwb        # the gpuwb program on the nodes
#   GPUWB_DIR=/shared/gpuwb           # a folder every node can write; one job-J/ folder per job
#   GPUWB_SINCE=2h                    # how far back each node collects
#   GPUWB_TIMEOUT=120                 # seconds; the node stays COMPLETING until the capture ends
# Afterwards, from any host: gpuwb cluster collect --out /shared/gpuwb/job-J --slurm-job J
# (the coverage table, with a "no answer" row for each node that wrote nothing, and DIR/merged.duckdb).
#
# It never fails: a failing Epilog drains the node.

GPUWB=/usr/local/bin/gpuwb
GPUWB_DIR=/var/spool/gpuwb
GPUWB_SINCE=2h
GPUWB_TIMEOUT=120
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

conf="$(dirname "$0")/gpuwb-epilog.conf"
# shellcheck source=/dev/null
[ -r "$conf" ] && . "$conf"

# SLURM_JOB_EXIT_CODE is the job's wait status: 0 only when it exited 0 (a time limit or a cancel is a signal)
[ "${SLURM_JOB_EXIT_CODE:-0}" = 0 ] && exit 0
case "$SLURM_JOB_ID" in '' | *[!0-9_]*) exit 0 ;; esac
case "$SLURMD_NODENAME" in '' | *[!A-Za-z0-9._-]* | .*) exit 0 ;; esac

dir="$GPUWB_DIR/job-$SLURM_JOB_ID/nodes"
mkdir -p "$dir" 2>/dev/null || exit 0
log="$dir/$SLURMD_NODENAME.log"
timeout -k 10 "$GPUWB_TIMEOUT" "$GPUWB" capture --safe --since "$GPUWB_SINCE" --slurm-job "$SLURM_JOB_ID" \
    --title "Slurm job $SLURM_JOB_ID (exit $SLURM_JOB_EXIT_CODE): $SLURMD_NODENAME" \
    -o "$dir/$SLURMD_NODENAME.duckdb" >"$log" 2>&1 </dev/null
status=$?
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "gpuwb-epilog: cut off after $GPUWB_TIMEOUT s" >>"$log"
elif [ "$status" != 0 ]; then
    echo "gpuwb-epilog: capture exited $status" >>"$log"
fi
exit 0
