'use strict';
// An idempotent KafkaJS producer, for tests/compat/test_idempotence.py: sends the records
// "<partition>-<i>" to each partition of a topic, one send per record per partition round so
// that every request is answered (or lost) on its own, and prints what KafkaJS reported as JSON.
//
// Usage: node idempotent.js BOOTSTRAP TOPIC PARTITIONS RECORDS_PER_PARTITION

const { Kafka, logLevel } = require('kafkajs');
const { toStderr, run } = require('./script');

const HARD_TIMEOUT_MS = 90000;

async function main() {
  const [bootstrap, topic, partitionsArg, recordsArg] = process.argv.slice(2);
  const partitions = Number(partitionsArg);
  const records = Number(recordsArg);
  const kafka = new Kafka({
    clientId: 'logway-compat-idempotent',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 10000,
    retry: { retries: 20, initialRetryTime: 50, maxRetryTime: 500 },
    logLevel: logLevel.ERROR,
    logCreator: toStderr,
  });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const acked = [];
  try {
    for (let i = 0; i < records; i += 1) {
      const messages = [];
      for (let partition = 0; partition < partitions; partition += 1) {
        messages.push({ partition, value: `${partition}-${i}` });
      }
      const results = await producer.send({ topic, acks: -1, messages });
      for (const r of results) {
        acked.push({ partition: r.partition, baseOffset: Number(r.baseOffset), errorCode: r.errorCode });
      }
    }
  } finally {
    await producer.disconnect();
  }
  return { acked };
}

run('idempotent.js', main, HARD_TIMEOUT_MS);
