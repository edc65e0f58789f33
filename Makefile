# The README's two commands. Both set up what they need first (see .ci/setup).
.PHONY: run test bench

run:
	bash .ci/setup run
	.venv/bin/logway --config config/server.properties

test:
	bash .ci/setup test
	.venv/bin/python -m pytest -n auto -q

bench:
	bash .ci/setup bench
	.venv/bin/python -m benchmarks.run
