#!/usr/bin/env bash
# Debian packages the integration tests and benchmarks use: real Slurm daemons (with slurmdbd and
# MariaDB for sacct), a real Prometheus with node_exporter and Alertmanager (the alert rules fired end to
# end), and lnav as the ingest peer to beat. Installs only what is missing.
set -euo pipefail
need=()
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client slurmdbd:slurmdbd munged:munge \
            mariadbd:mariadb-server prometheus:prometheus prometheus-node-exporter:prometheus-node-exporter \
            prometheus-alertmanager:prometheus-alertmanager lnav:lnav curl:curl ss:iproute2; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: missing ${need[*]}; run as root or install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
