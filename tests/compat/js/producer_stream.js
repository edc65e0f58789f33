'use strict';
// A KafkaJS producer driven line by line, for the fault workloads of tests/cluster
// (tests/cluster/workload.py): each line on stdin is {"topic", "value", "partition"}, and for each one
// a line on stdout reports {"value", "partition", "offset"} once acknowledged or
// {"value", "error"} once KafkaJS gives up. The end of stdin ends the producer, after the
// answers still out.
//
// A partition's values are sent one at a time, in arrival order: an idempotent KafkaJS producer
// takes a partition's sequence number when it sends and gives it back when the request fails,
// so two requests of one partition in flight could be written out of order. Partitions proceed
// side by side.
//
// Usage: node producer_stream.js BOOTSTRAP CONFIG_JSON (BOOTSTRAP: host:port,host:port,...)
//   CONFIG_JSON: {"client": {...Kafka() options}, "producer": {...kafka.producer() options}}

const readline = require('readline');
const { Kafka, logLevel } = require('kafkajs');
const Cluster = require('kafkajs/src/cluster');
const { toStderr } = require('./script');

// KafkaJS can acknowledge a message without sending it (send resolves to []): when its cached
// metadata lacks the partition, or when the broker it picked for the leader is filed under
// another node id. The producer's cluster is kept here (its prototype's method is wrapped, as
// the producer does not expose it) so that such an answer logs KafkaJS's view, at most once a
// second.
let producerCluster = null;
const findLeaderForPartitions = Cluster.prototype.findLeaderForPartitions;
Cluster.prototype.findLeaderForPartitions = function keepCluster(topic, partitions) {
  producerCluster = this;
  return findLeaderForPartitions.call(this, topic, partitions);
};
let viewLoggedAt = 0;
const logView = (topic, partition) => {
  if (producerCluster === null || Date.now() - viewLoggedAt < 1000) return;
  viewLoggedAt = Date.now();
  const pool = producerCluster.brokerPool;
  process.stderr.write(`${JSON.stringify({
    level: 1,
    timestamp: new Date().toISOString(),
    message: 'KafkaJS acknowledged nothing: its view',
    topic,
    partition,
    cached: producerCluster.findTopicPartitionMetadata(topic).map((p) => [p.partitionId, p.leader]),
    metadataBrokers: ((pool.metadata || {}).brokers || []).map((b) => [b.nodeId, `${b.host}:${b.port}`]),
    pool: Object.entries(pool.brokers).map(([key, b]) => [key, b.nodeId, `${b.connectionPool.host}:${b.connectionPool.port}`]),
    seed: pool.seedBroker ? [pool.seedBroker.nodeId, `${pool.seedBroker.connectionPool.host}`] : null,
  })}\n`);
};

async function main() {
  const [bootstrap, configArg] = process.argv.slice(2);
  const config = JSON.parse(configArg);
  const kafka = new Kafka({
    clientId: 'logway-workload',
    brokers: bootstrap.split(','),
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    ...config.client,
  });
  const producer = kafka.producer(config.producer);
  await producer.connect();

  const report = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
  const tails = new Map(); // "topic/partition" -> the promise of its last send

  const send = async (topic, value, partition) => {
    try {
      const [result] = await producer.send({ topic, acks: -1, messages: [{ partition, value }] });
      if (result === undefined) {
        logView(topic, partition);
        report({ value, error: 'KafkaJS acknowledged nothing' });
        return;
      }
      report({ value, partition: result.partition, offset: Number(result.baseOffset) });
    } catch (error) {
      report({ value, error: `${error.name}: ${error.message}` });
    }
  };

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const { topic, value, partition } = JSON.parse(line);
    const key = `${topic}/${partition}`;
    const previous = tails.get(key) || Promise.resolve();
    tails.set(key, previous.then(() => send(topic, value, partition)));
  }
  await Promise.all(tails.values());
  await producer.disconnect();
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack || error}\n`);
    process.exit(1);
  },
);
