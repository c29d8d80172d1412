"""Postmortem rules: the cause catalog (causes.yaml: what each root cause means, what it leads to,
what to do), the monitoring templates (alerts.yaml) and the isolation rules (isolation.yaml). Read
by analysis to name causes and by the postmortem and prevention stages to write what it leaves behind."""
