# The README's two commands. Both set up what they need first (see .ci/setup).
.PHONY: run test bench cluster

run:
	bash .ci/setup run
	@echo "Starting logway on 127.0.0.1:9092 (data in ./data; Ctrl-C stops it). From another shell:"
	@echo '  echo "hello" | kcat -b 127.0.0.1:9092 -P -t greetings'
	@echo '  kcat -b 127.0.0.1:9092 -C -t greetings -e'
	@command -v kcat >/dev/null || echo "kcat is not installed here: sudo apt-get install kcat"
	.venv/bin/logway --config config/server.properties

# check-install first: a plain `pip install .` in a throwaway venv must give a broker that serves kcat.
# lint-imports: the package layering of docs/architecture.md (contracts in pyproject.toml).
test:
	bash .ci/setup test
	bash .ci/check-install
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -n auto -q

# ZooKeeper and three brokers on 127.0.0.1 (2181; 9092-9094), data in ./data-cluster; Ctrl-C stops them.
cluster:
	bash .ci/setup cluster
	.venv/bin/python -m broker.local_cluster --brokers 3

bench:
	bash .ci/setup bench
	.venv/bin/python -m benchmarks.run
