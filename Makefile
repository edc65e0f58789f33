# The README's two commands. Both set up what they need first (see .ci/setup).
.PHONY: run test bench cluster

run:
	bash .ci/setup run
	.venv/bin/logway --config config/server.properties

test:
	bash .ci/setup test
	.venv/bin/python -m pytest -n auto -q

# ZooKeeper and three brokers on 127.0.0.1 (2181; 9092-9094), data in ./data-cluster; Ctrl-C stops them.
cluster:
	bash .ci/setup cluster
	.venv/bin/python -m broker.local_cluster --brokers 3

bench:
	bash .ci/setup bench
	.venv/bin/python -m benchmarks.run
