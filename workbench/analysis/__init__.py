"""The playbook engine: checks, hypotheses and causes, clocks, workload, series."""
