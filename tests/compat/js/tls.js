'use strict';
// KafkaJS over TLS, for tests/compat/test_tls.py: produce to a topic through a listener that
// requires a client certificate (ssl: {ca, cert, key}) and print the topic's offsets as JSON.
//
// Usage: node tls.js BOOTSTRAP TOPIC CA_PEM CERT_PEM KEY_PEM

const fs = require('fs');
const { Kafka, Partitioners, logLevel } = require('kafkajs');
const { toStderr, run } = require('./script');

const HARD_TIMEOUT_MS = 45000;

async function main() {
  const [bootstrap, topic, caPath, certPath, keyPath] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: 'logway-compat-tls',
    brokers: [bootstrap],
    ssl: {
      ca: [fs.readFileSync(caPath, 'utf-8')],
      cert: fs.readFileSync(certPath, 'utf-8'),
      key: fs.readFileSync(keyPath, 'utf-8'),
    },
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 3, initialRetryTime: 200 },
    logLevel: logLevel.WARN,
    logCreator: toStderr,
  });
  const admin = kafka.admin();
  await admin.connect();
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
    const messages = [];
    for (let i = 0; i < 10; i += 1) messages.push({ key: `k${i}`, value: `kafkajs-${i}` });
    await producer.send({ topic, acks: -1, messages });
    return { offsets: await admin.fetchTopicOffsets(topic) };
  } finally {
    await producer.disconnect();
    await admin.disconnect();
  }
}

run('tls.js', main, HARD_TIMEOUT_MS);
