# Shortcuts where make is installed: `make run` and `make test` are the README's two commands
# (.ci/run-broker, .ci/run-tests); each sets up what it needs first (see .ci/setup).
.PHONY: run test bench cluster

run:
	bash .ci/run-broker

test:
	bash .ci/run-tests

# ZooKeeper and three brokers on 127.0.0.1 (2181; 9092-9094), data in ./data-cluster; Ctrl-C stops them.
cluster:
	bash .ci/setup cluster
	.venv/bin/python -m broker.local_cluster --brokers 3

bench:
	bash .ci/setup bench
	.venv/bin/python -m benchmarks.run
