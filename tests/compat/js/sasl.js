'use strict';
// KafkaJS over SASL_PLAINTEXT, for tests/compat/test_sasl.py: authenticate with MECHANISM
// ('plain', 'scram-sha-256' or 'scram-sha-512'), produce MESSAGES to TOPIC, read the topic's
// offsets back, and print {"produced": [...], "offsets": [...]} on stdout; an authentication
// failure exits 1 with KafkaJS's error on stderr. With SASL_SSL_CA set (a PEM file), over
// SASL_SSL, trusting that CA (tests/compat/test_sasl_ssl.py).
//
// Usage: [SASL_SSL_CA=ca.pem] node sasl.js BOOTSTRAP MECHANISM USERNAME PASSWORD TOPIC MESSAGES...

const fs = require('fs');
const { Kafka, Partitioners, logLevel } = require('kafkajs');
const { toStderr, run } = require('./script');

const HARD_TIMEOUT_MS = 45000;

async function main() {
  const [bootstrap, mechanism, username, password, topic, ...messages] = process.argv.slice(2);
  const kafka = new Kafka({
    clientId: 'logway-compat-sasl',
    brokers: [bootstrap],
    sasl: { mechanism, username, password },
    ...(process.env.SASL_SSL_CA ? { ssl: { ca: [fs.readFileSync(process.env.SASL_SSL_CA, 'utf-8')] } } : {}),
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 0 },
    logLevel: logLevel.NOTHING,
    logCreator: toStderr,
  });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  let produced;
  try {
    produced = await producer.send({ topic, messages: messages.map((value) => ({ value })) });
  } finally {
    await producer.disconnect();
  }
  const admin = kafka.admin();
  await admin.connect();
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    return { produced: produced.map((r) => r.errorCode), offsets: offsets.map((o) => Number(o.high)) };
  } finally {
    await admin.disconnect();
  }
}

run('sasl.js', main, HARD_TIMEOUT_MS);
