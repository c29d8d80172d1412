# The two README commands. Both set up everything they need on a fresh machine.
.PHONY: demo test mutation

demo:  ## install into .venv, then run `gpuwb demo`
	bash scripts/run.sh

test:  ## system packages (apt-get), .venv with the test tools, ruff, pytest
	bash scripts/test.sh

mutation:  ## mutation score per promise-carrying module (mutmut; slow: run by hand, not in CI)
	bash scripts/mutation.sh
