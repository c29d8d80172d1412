"""The layered playbooks (training.yaml, inference.yaml) and the checks they run (checks/<layer>.yaml,
each check naming the playbooks that run it in its ``runs_in``): read by the analysis stage against a
bundle."""
