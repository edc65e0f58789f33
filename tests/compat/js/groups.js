'use strict';
// A KafkaJS consumer group for tests/compat/test_groups_kafkajs.py: two members subscribe to a
// four-partition topic; once they share it two partitions each, PER_PARTITION records are
// produced to every partition; each member commits every message after processing it
// (eachMessage, autoCommit off); when all of them are in, the members disconnect (LeaveGroup).
// What each member was assigned and processed, and the group as KafkaJS's admin describes it
// afterwards, are printed as one JSON document on stdout.
//
// Usage: node groups.js BOOTSTRAP TOPIC GROUP PER_PARTITION

const { Kafka, Partitioners, logLevel } = require('kafkajs');

const PARTITIONS = 4;
const WAIT_MS = 20000;
const HARD_TIMEOUT_MS = 50000;

// KafkaJS logs to stdout by default; keep stdout for the result.
const toStderr = () => ({ level, log }) => {
  process.stderr.write(`${JSON.stringify({ level, ...log })}\n`);
};

async function waitFor(condition, what) {
  const deadline = Date.now() + WAIT_MS;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`no ${what} within ${WAIT_MS} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function balanced(members) {
  const every = members.flatMap((m) => m.assignment).sort((a, b) => a - b);
  return (
    every.join(',') === [...Array(PARTITIONS).keys()].join(',') &&
    members.every((m) => m.assignment.length === PARTITIONS / members.length)
  );
}

async function main() {
  const [bootstrap, topic, groupId, perPartitionArg] = process.argv.slice(2);
  const perPartition = Number(perPartitionArg);
  const kafka = new Kafka({
    clientId: 'logway-compat-groups',
    brokers: [bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 5, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator: toStderr,
  });

  const members = [0, 1].map((i) => ({
    name: `kafkajs-${i}`,
    consumer: kafka.consumer({
      groupId,
      sessionTimeout: 6000,
      // A member learns of a rebalance at its next heartbeat; KafkaJS heartbeats between fetches.
      heartbeatInterval: 250,
      maxWaitTimeInMs: 200,
      rebalanceTimeout: 15000,
    }),
    assignment: [],
    processed: [],
  }));

  for (const member of members) {
    const { consumer } = member;
    consumer.on(consumer.events.REBALANCING, () => {
      member.assignment = [];
    });
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      member.assignment = [...(payload.memberAssignment[topic] || [])].sort((a, b) => a - b);
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        member.processed.push({ partition, offset: Number(message.offset), value: message.value.toString() });
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
      },
    });
  }

  const result = {};
  try {
    await waitFor(() => balanced(members), 'balanced assignment');
    result.assignments = members.map((m) => m.assignment);

    const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    try {
      const messages = [];
      for (let partition = 0; partition < PARTITIONS; partition += 1) {
        for (let offset = 0; offset < perPartition; offset += 1) {
          messages.push({ partition, value: `p${partition}-${offset}` });
        }
      }
      await producer.send({ topic, acks: -1, messages });
    } finally {
      await producer.disconnect();
    }

    const total = () => members.reduce((sum, m) => sum + m.processed.length, 0);
    await waitFor(() => total() >= PARTITIONS * perPartition, 'every message processed');
    // Before disconnecting: the first member's leaving makes the other one rebalance.
    result.members = members.map((m) => ({ name: m.name, assignment: m.assignment, processed: [...m.processed] }));
  } finally {
    for (const member of members) {
      await member.consumer.disconnect();
    }
  }

  const admin = kafka.admin();
  await admin.connect();
  try {
    const { groups } = await admin.describeGroups([groupId]);
    result.describedAfter = groups.map((g) => ({ groupId: g.groupId, state: g.state, members: g.members.length }));
    const [fetched] = await admin.fetchOffsets({ groupId, topics: [topic] });
    result.fetchedOffsets = fetched.partitions
      .map((p) => ({ partition: p.partition, offset: Number(p.offset) }))
      .sort((a, b) => a.partition - b.partition);
  } finally {
    await admin.disconnect();
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

const guard = setTimeout(() => {
  process.stderr.write(`groups.js did not finish within ${HARD_TIMEOUT_MS} ms\n`);
  process.exit(3);
}, HARD_TIMEOUT_MS);
guard.unref();

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack || error}\n`);
    process.exit(1);
  },
);
