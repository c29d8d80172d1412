"""Capture at fleet scale: one ``gpuwb capture`` per node through the engines operators already run
(Slurm's ``srun`` and epilog, a Kubernetes Job), and one coverage table that names every node, the
ones that did not answer included."""
