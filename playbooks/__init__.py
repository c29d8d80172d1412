"""The layered playbooks (training.yaml, inference.yaml) and the checks they run (checks.yaml): read by
the analysis stage against a bundle."""
