"""Postmortem rules: the cause catalog (causes/<cause_id>.yaml, one file per cause: what it means, what
it leads to, what to do, its monitoring templates and its isolation rule; causes/FORMAT.md) and the
isolation templates the causes name (isolation.yaml). Read by analysis to name causes and by the
postmortem and prevention stages to write what it leaves behind."""
