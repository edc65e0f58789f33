'use strict';
// One KafkaJS session against a broker, for tests/compat/test_kafkajs.py: create a topic, produce
// to it (GZIP and uncompressed), ask for its offsets, and print what KafkaJS reported as one JSON
// document on stdout. The Python test then reads the records back with another client.
//
// Usage: node scenario.js BOOTSTRAP TOPIC BASE_TIMESTAMP_MS
// KafkaJS has no consumer without a group, and groups do not exist yet, so nothing is consumed.

const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs');
const { toStderr, run } = require('./script');

const HARD_TIMEOUT_MS = 45000;

async function main() {
  const [bootstrap, topic, baseTimestampArg] = process.argv.slice(2);
  const baseTimestamp = Number(baseTimestampArg);
  const kafka = new Kafka({
    clientId: 'logway-compat',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 3, initialRetryTime: 200 },
    logLevel: logLevel.WARN,
    logCreator: toStderr,
  });
  const result = {};

  const admin = kafka.admin();
  await admin.connect();
  try {
    result.created = await admin.createTopics({
      topics: [{ topic, numPartitions: 2, replicationFactor: 1 }],
      waitForLeaders: true,
      timeout: 10000,
    });
    // Creating it again is refused (TOPIC_ALREADY_EXISTS), which KafkaJS reports as false.
    result.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] });
    result.listed = (await admin.listTopics()).includes(topic);
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
    result.metadata = metadata.topics.map((t) => ({
      name: t.name,
      partitions: t.partitions
        .map((p) => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr }))
        .sort((a, b) => a.partition - b.partition),
    }));

    const producer = kafka.producer({
      allowAutoTopicCreation: false,
      createPartitioner: Partitioners.DefaultPartitioner,
    });
    await producer.connect();
    try {
      // Ten records per partition, stamped a second apart, GZIP-compressed.
      const gzipMessages = [];
      for (let i = 0; i < 20; i += 1) {
        gzipMessages.push({
          partition: i % 2,
          key: `key-${i}`,
          value: `value-${i}`,
          timestamp: String(baseTimestamp + Math.floor(i / 2) * 1000),
          headers: { index: `${i}`, codec: 'gzip' },
        });
      }
      result.gzip = await producer.send({
        topic,
        acks: -1,
        compression: CompressionTypes.GZIP,
        messages: gzipMessages,
      });
      // Then one uncompressed record with a null key and one with a null value on partition 0.
      result.plain = await producer.send({
        topic,
        acks: -1,
        messages: [
          { partition: 0, key: null, value: 'no-key', timestamp: String(baseTimestamp + 20000) },
          { partition: 0, key: 'tombstone', value: null, timestamp: String(baseTimestamp + 21000) },
        ],
      });
      result.batch = await producer.sendBatch({
        acks: -1,
        compression: CompressionTypes.GZIP,
        topicMessages: [
          { topic, messages: [{ partition: 1, value: 'batch-a' }, { partition: 1, value: 'batch-b' }] },
        ],
      });
    } finally {
      await producer.disconnect();
    }

    const sortByPartition = (list) => list.sort((a, b) => a.partition - b.partition);
    result.offsets = sortByPartition(await admin.fetchTopicOffsets(topic));
    result.offsetsAt5500 = sortByPartition(
      await admin.fetchTopicOffsetsByTimestamp(topic, baseTimestamp + 5500),
    );
    result.offsetsAtStart = sortByPartition(
      await admin.fetchTopicOffsetsByTimestamp(topic, baseTimestamp - 1000),
    );
  } finally {
    await admin.disconnect();
  }
  return result;
}

run('scenario', main, HARD_TIMEOUT_MS);
