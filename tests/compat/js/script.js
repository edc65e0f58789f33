'use strict';
// What every KafkaJS script of tests/compat shares: logs to stderr (stdout carries the result),
// and running its main function under a hard time bound with an exit code for the test.

// KafkaJS logs to stdout by default; keep stdout for the result.
const toStderr = () => ({ level, log }) => {
  process.stderr.write(`${JSON.stringify({ level, ...log })}\n`);
};

// Run `main`, print its result as one JSON document on stdout and exit 0; exit 1 on an error,
// 3 when it runs longer than `hardTimeoutMs`.
function run(name, main, hardTimeoutMs) {
  const guard = setTimeout(() => {
    process.stderr.write(`${name} did not finish within ${hardTimeoutMs} ms\n`);
    process.exit(3);
  }, hardTimeoutMs);
  guard.unref();
  main().then(
    (result) => {
      process.stdout.write(`${JSON.stringify(result)}\n`);
      process.exit(0);
    },
    (error) => {
      process.stderr.write(`${error.stack || error}\n`);
      process.exit(1);
    },
  );
}

module.exports = { toStderr, run };
