# The two README commands. Both set up everything they need on a fresh machine.
.PHONY: demo test

demo:  ## install into .venv, then run `gpuwb demo`
	bash scripts/run.sh

test:  ## system packages (apt-get), .venv with the test tools, ruff, pytest
	bash scripts/test.sh
