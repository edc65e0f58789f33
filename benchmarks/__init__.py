"""Benchmarks: logway against librdkafka's mock cluster and against the machine. Run
`python -m benchmarks.run` (see benchmarks/run.py and benchmarks/RESULTS.md)."""
