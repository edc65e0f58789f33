"""The load the fault tests put on a cluster while they break it: producers in threads writing
distinct values, bounded in count and in time, recording what became of each (checker.History),
and a reader that takes a topic back out to the high watermark.

- `ProducerWorkload`: one value at a time, round-robin over the partitions, from confluent-kafka
  (librdkafka), kafka-python, aiokafka or KafkaJS, plain or idempotent as its config says.
- `TransactionalWorkload`: transactions of a few values each, committed or aborted at random,
  each outcome as the producer learnt it (checker.Transactions).
- `read_topic`: every record of a topic up to where its partitions end once they are stable.
"""

import asyncio
import concurrent.futures
import json
import logging
import random
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine

import aiokafka
import kafka
import kafka.errors
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.cluster.checker import History, Transactions
from tests.compat.kafkajs_support import JS_DIR

CONFLUENT = "confluent-kafka"
KAFKA_PYTHON = "kafka-python"
AIOKAFKA = "aiokafka"
KAFKAJS = "kafkajs"

OnAck = Callable[[int, int], None]  # (partition, offset)
OnFail = Callable[[str], None]


class _ConfluentClient:
    """librdkafka through confluent-kafka: answers are handed over by poll/flush."""

    library = CONFLUENT
    defaults = {
        "acks": "all",
        "enable.idempotence": False,
        # One request in flight per broker keeps a partition's order through retries.
        "max.in.flight.requests.per.connection": 1,
        "linger.ms": 2,
        "message.timeout.ms": 20_000,
        "request.timeout.ms": 5_000,
        "retry.backoff.ms": 200,
        "topic.metadata.refresh.interval.ms": 1_000,
    }

    def __init__(self, bootstrap: str, config: dict) -> None:
        # librdkafka's statistics, the latest kept for state(): where a producer that stopped
        # writing is stuck (its idempotence state, each partition's leader and queues, each
        # broker connection), which its debug=eos log does not tell.
        self._stats: str | None = None
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                **self.defaults,
                "statistics.interval.ms": 1_000,
                "stats_cb": self._keep_stats,
                **config,
            }
        )

    def _keep_stats(self, stats: str) -> None:
        self._stats = stats

    def send(self, topic: str, value: bytes, partition: int, on_ack: OnAck, on_fail: OnFail) -> None:
        def report(err, msg) -> None:
            if err is None:  # confluent-kafka gives no offset (librdkafka's -1001) as None
                on_ack(msg.partition(), -1 if msg.offset() is None else msg.offset())
            else:
                on_fail(str(err))

        while True:
            try:
                self.producer.produce(topic, value, partition=partition, on_delivery=report)
                return
            except BufferError:  # the local queue is full: let answers drain it
                self.producer.poll(0.1)

    def wait(self, seconds: float) -> None:
        self.producer.poll(seconds)

    def state(self) -> str:
        if self.producer is None:
            return "closed"
        return f"{len(self.producer)} messages in librdkafka's queues; {_stats_summary(self._stats)}"

    def flush(self, seconds: float) -> None:
        self.producer.flush(seconds)

    def close(self) -> None:
        try:
            self.producer.flush(0)
        except KafkaException:
            pass  # a producer in a fatal state: what is still out stays unknown
        # A message still out holds its delivery callback, which holds this client: librdkafka's
        # reference is one Python's collector cannot see, so the producer would live on with the
        # test process, connecting to the next test's brokers at the same addresses. Purged, its
        # values are reported failed (unknown outcome), and the callbacks are let go.
        self.producer.purge()
        self.producer.poll(0)  # serves the purged messages' reports
        # And the instance itself goes now: the workload that holds this client sits in a
        # reference cycle (its thread's target), which only the cyclic collector frees, maybe
        # schedules later, while librdkafka would go on reconnecting to the addresses.
        self.producer = None

    # transactions
    def init(self, seconds: float) -> None:
        self.producer.init_transactions(seconds)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def commit(self, seconds: float) -> None:
        self.producer.commit_transaction(seconds)

    def abort(self, seconds: float) -> None:
        self.producer.abort_transaction(seconds)

    @staticmethod
    def retriable(error: Exception) -> bool:
        return isinstance(error, KafkaException) and error.args[0].retriable()


def _stats_summary(stats: str | None) -> str:
    """The parts of librdkafka's statistics that show where a producer is stuck."""
    if stats is None:
        return "no statistics yet"
    document = json.loads(stats)
    eos = document.get("eos", {})
    parts = [
        f"statistics {time.time() - document['time']:.0f} s old",
        f"idempotence {eos.get('idemp_state')} for {eos.get('idemp_stateage', 0) / 1e3:.1f} s, "
        f"transactions {eos.get('txn_state')}, producer id {eos.get('producer_id')} epoch "
        f"{eos.get('producer_epoch')} ({eos.get('epoch_cnt')} epochs)",
    ]
    parts += [
        f"broker {broker['nodeid']} {broker['state']} (outbuf {broker['outbuf_msg_cnt']}, "
        f"waiting for {broker['waitresp_cnt']} answers)"
        for broker in document.get("brokers", {}).values()
        if broker.get("nodeid", -1) >= 0
    ]
    for topic in document.get("topics", {}).values():
        parts += [
            f"{topic['topic']}[{p['partition']}] leader {p['leader']}, queued {p['msgq_cnt']}, "
            f"to send {p['xmit_msgq_cnt']}, in flight {p['msgs_inflight']}"
            for p in topic.get("partitions", {}).values()
            if p["partition"] >= 0
        ]
    return "; ".join(parts)


class _KafkaPythonClient:
    """kafka-python: answers come on its sender thread."""

    library = KAFKA_PYTHON
    defaults = {
        "acks": "all",
        "enable_idempotence": False,
        "max_in_flight_requests_per_connection": 1,
        "linger_ms": 2,
        "delivery_timeout_ms": 20_000,
        "request_timeout_ms": 5_000,
        "retry_backoff_ms": 200,
        "metadata_max_age_ms": 1_000,
        "max_block_ms": 10_000,
    }

    def __init__(self, bootstrap: str, config: dict) -> None:
        self.producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **{**self.defaults, **config})
        self._pending = None  # ("commit" or "abort", the EndTxn result being waited for)

    def send(self, topic: str, value: bytes, partition: int, on_ack: OnAck, on_fail: OnFail) -> None:
        try:
            future = self.producer.send(topic, value, partition=partition)
        except kafka.errors.KafkaError as error:  # no metadata or buffer within max_block_ms
            on_fail(repr(error))
            return
        future.add_callback(lambda metadata: on_ack(metadata.partition, metadata.offset))
        future.add_errback(lambda error: on_fail(repr(error)))

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def state(self) -> str:
        sender = self.producer._sender
        manager = self.producer._transaction_manager
        return f"kafka-python sender thread {'alive' if sender.is_alive() else 'dead'}, " \
               f"transaction manager {getattr(manager, '_current_state', None)}"

    def flush(self, seconds: float) -> None:
        try:
            self.producer.flush(seconds)
        except kafka.errors.KafkaTimeoutError:
            pass  # what is still out stays unknown

    def close(self) -> None:
        try:
            self.producer.close(timeout=5)
        except kafka.errors.KafkaError:
            pass  # what is still out stays unknown

    # transactions
    def init(self, seconds: float) -> None:
        self.producer.init_transactions()  # bounded by max_block_ms

    def begin(self) -> None:
        self.producer.begin_transaction()

    # KafkaProducer.commit_transaction and abort_transaction wait without a bound; these are
    # the same calls with one. A timed-out EndTxn is still retried by the sender: asking again
    # waits for that one.
    def commit(self, seconds: float) -> None:
        self._end("commit", self.producer._transaction_manager.begin_commit, seconds)

    def abort(self, seconds: float) -> None:
        self._end("abort", self.producer._transaction_manager.begin_abort, seconds)

    def _end(self, kind: str, begin: Callable, seconds: float) -> None:
        if self._pending is None:
            self._pending = (kind, begin())
            self.producer._sender.wakeup()
        pending, result = self._pending
        if pending != kind:
            raise kafka.errors.IllegalStateError(f"{kind} asked while a {pending} is under way")
        try:
            answered = result.wait(timeout_ms=seconds * 1000)
        except BaseException:
            self._pending = None
            raise
        if not answered:
            raise kafka.errors.KafkaTimeoutError(f"no answer within {seconds} s")
        self._pending = None

    @staticmethod
    def retriable(error: Exception) -> bool:
        return isinstance(error, kafka.errors.KafkaTimeoutError)


class _AiokafkaClient:
    """aiokafka: its event loop runs in a thread of this client, where answers come. An
    idempotent aiokafka producer retries a batch until it is answered (it never expires one).
    `config` may hold "log_path", a file for aiokafka's log (its loggers are process-wide)."""

    library = AIOKAFKA
    defaults = {
        "acks": "all",
        "enable_idempotence": False,
        "linger_ms": 2,
        "request_timeout_ms": 5_000,
        "retry_backoff_ms": 200,
        "metadata_max_age_ms": 1_000,
    }

    def __init__(self, bootstrap: str, config: dict) -> None:
        config = dict(config)
        self._log = _log_to(logging.getLogger("aiokafka"), config.pop("log_path", None))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aiokafka-loop", daemon=True)
        self._thread.start()
        self.producer = self._call(self._start(bootstrap, {**self.defaults, **config}), 30)

    @staticmethod
    async def _start(bootstrap: str, config: dict) -> aiokafka.AIOKafkaProducer:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, **config)  # needs the running loop
        await producer.start()
        return producer

    def _call(self, coroutine: Coroutine, seconds: float):
        """`coroutine`'s result, run on the client's loop; TimeoutError after `seconds`."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {seconds} s") from None

    def send(self, topic: str, value: bytes, partition: int, on_ack: OnAck, on_fail: OnFail) -> None:
        def answered(delivery: asyncio.Future) -> None:
            if delivery.cancelled():
                return  # the producer stopped: the value stays unknown
            if delivery.exception() is not None:
                # in the client's log beside its own lines, which never name a failed batch
                logging.getLogger("aiokafka.workload").warning("%s to partition %d failed: %r", value, partition,
                                                               delivery.exception())
                on_fail(repr(delivery.exception()))
            else:
                on_ack(delivery.result().partition, delivery.result().offset)

        async def enqueue() -> None:
            delivery = await self.producer.send(topic, value, partition=partition)
            delivery.add_done_callback(answered)

        try:
            self._call(enqueue(), 60)  # waits while aiokafka's buffer is full or metadata missing
        except Exception as error:  # noqa: BLE001 (not enqueued: whatever aiokafka raised)
            on_fail(repr(error))

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def state(self) -> str:
        return f"aiokafka loop thread {'alive' if self._thread.is_alive() else 'dead'}"

    def flush(self, seconds: float) -> None:
        try:
            self._call(self.producer.flush(), seconds)
        except TimeoutError:
            pass  # what is still out stays unknown

    def close(self) -> None:
        try:
            self._call(self.producer.stop(), 10)
        except Exception:  # noqa: BLE001 (what is still out stays unknown)
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        if self._log is not None:
            logging.getLogger("aiokafka").removeHandler(self._log)
            self._log.close()


def _log_to(logger: logging.Logger, path: str | None) -> logging.Handler | None:
    """Everything `logger` logs from DEBUG up, also written to `path` (None: nothing)."""
    if path is None:
        return None
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


_KAFKAJS_RETRY_FOREVER = {"retries": 2**53 - 1, "initialRetryTime": 200, "maxRetryTime": 2_000}


class _KafkaJSClient:
    """KafkaJS in a Node.js process (tests/compat/js/producer_stream.js): values go to its stdin
    as JSON lines, answers come back on its stdout, read by a thread of this client. `config`
    holds Kafka() options under "client" and producer() options under "producer", and
    optionally "log_path", a file for KafkaJS's log."""

    library = KAFKAJS
    defaults = {
        # A send is retried until it is answered, as KafkaJS's idempotent producer does by
        # default, and so are its metadata requests (the client's retries; 5 by default): KafkaJS
        # gives a partition's sequence number back when a send fails for good and the next value
        # takes it, so were the failed one written, the broker would answer the next as its
        # duplicate, with its offset (seed 3752034756: a send failed for want of a leader after
        # a timed-out attempt was written). Retries 2 s apart at most, to resume soon after a heal.
        "client": {"connectionTimeout": 3_000, "requestTimeout": 5_000, "retry": _KAFKAJS_RETRY_FOREVER},
        "producer": {"idempotent": False, "maxInFlightRequests": 1, "retry": _KAFKAJS_RETRY_FOREVER},
    }

    def __init__(self, bootstrap: str, config: dict) -> None:
        options = {part: {**self.defaults[part], **config.get(part, {})} for part in ("client", "producer")}
        log_path = config.get("log_path")
        self._log = open(log_path, "ab") if log_path else None
        self._process = subprocess.Popen(
            ["node", str(JS_DIR / "producer_stream.js"), bootstrap, json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log or subprocess.DEVNULL,
        )
        self._answers: dict[bytes, tuple[OnAck, OnFail]] = {}
        self._answered = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="kafkajs-answers", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._process.stdout:
            answer = json.loads(line)
            value = answer["value"].encode()
            with self._answered:
                on_ack, on_fail = self._answers.pop(value)
                self._answered.notify_all()
            if "error" in answer:
                on_fail(answer["error"])
            else:
                on_ack(answer["partition"], answer["offset"])

    def send(self, topic: str, value: bytes, partition: int, on_ack: OnAck, on_fail: OnFail) -> None:
        with self._answered:
            self._answers[value] = (on_ack, on_fail)
        line = json.dumps({"topic": topic, "value": value.decode(), "partition": partition})
        try:
            self._process.stdin.write(f"{line}\n".encode())
            self._process.stdin.flush()
        except BrokenPipeError:
            on_fail(f"the KafkaJS process ended with {self._process.poll()}")

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def state(self) -> str:
        code = self._process.poll()
        return f"{len(self._answers)} values unanswered, node {'running' if code is None else f'exited {code}'}"

    def flush(self, seconds: float) -> None:
        with self._answered:
            self._answered.wait_for(lambda: not self._answers, seconds)

    def close(self) -> None:
        try:
            self._process.stdin.close()  # KafkaJS waits for the answers still out, then ends
        except BrokenPipeError:
            pass
        try:
            self._process.wait(15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(5)
        self._process.stdout.close()
        if self._log is not None:
            self._log.close()


_CLIENTS = {CONFLUENT: _ConfluentClient, KAFKA_PYTHON: _KafkaPythonClient, AIOKAFKA: _AiokafkaClient,
            KAFKAJS: _KafkaJSClient}


def _recorded(workload, run: Callable[[], None]) -> Callable[[], None]:
    """`run`, keeping what raised out of it in `workload.error` for join() to report."""
    def recorded() -> None:
        try:
            run()
        except BaseException as error:
            workload.error = error
            raise

    return recorded


class ProducerWorkload:
    """Writes `b"<prefix>-<n>"` for n = 0, 1, ... round-robin over the partitions until `count`
    values are sent, `duration_s` passes, or stop() is called; then waits up to `drain_s` for the
    answers still out. Values whose answer never came are History.unknown. `client` is
    CONFLUENT, KAFKA_PYTHON, AIOKAFKA or KAFKAJS; `config` adds to (or overrides) its defaults,
    in its own names."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        count: int,
        duration_s: float,
        rate_per_s: float = 200.0,
        drain_s: float = 30.0,
        prefix: str = "w",
        config: dict | None = None,
        client: str = CONFLUENT,
    ) -> None:
        self.topic, self.partitions, self.count = topic, partitions, count
        self.duration_s, self.interval_s, self.drain_s = duration_s, 1.0 / rate_per_s, drain_s
        self.prefix = prefix
        self.history = History()
        self._stop = threading.Event()
        self._client = _CLIENTS[client](bootstrap, config or {})
        self.error: BaseException | None = None  # what ended the thread, if not its end
        self._thread = threading.Thread(target=_recorded(self, self._run), name=f"workload-{prefix}-{topic}",
                                        daemon=True)

    def start(self) -> "ProducerWorkload":
        self._thread.start()
        return self

    def stop(self) -> History:
        self.request_stop()
        return self.join()

    def request_stop(self) -> None:
        """Stop sending (the answers still out are waited for); join() waits for the end."""
        self._stop.set()

    def join(self) -> History:
        self._thread.join(self.duration_s + self.drain_s + 10)
        assert not self._thread.is_alive(), f"the workload {self.prefix} did not end in time"
        assert self.error is None, f"the workload {self.prefix} failed: {self.error!r}"
        return self.history

    @property
    def acked_count(self) -> int:
        return len(self.history.acked)

    def state(self) -> str:
        """What the workload is doing, for a report on a stalled one."""
        return f"{self.prefix}: {len(self.history.sent)} sent, {self.acked_count} acked, " \
               f"{len(self.history.failed)} failed; {self._client.state()}"

    def _run(self) -> None:
        deadline = time.monotonic() + self.duration_s
        pace = _Pace(self._client, self.interval_s)
        try:
            for n in range(self.count):
                if self._stop.is_set() or time.monotonic() >= deadline:
                    break
                _send(self._client, self.topic, self.history, f"{self.prefix}-{n}".encode(), n % self.partitions)
                pace.wait()
            self._client.flush(self.drain_s)
        finally:
            self._client.close()


class _Pace:
    """Waits (serving the client's answers) so that the calls come `interval_s` apart on
    average; after a stall of more than a second it starts afresh rather than bursting."""

    def __init__(self, client, interval_s: float) -> None:
        self.client, self.interval_s = client, interval_s
        self.next_at = time.monotonic()

    def wait(self) -> None:
        now = time.monotonic()
        self.next_at = max(self.next_at + self.interval_s, now - 1.0)
        while (left := self.next_at - time.monotonic()) > 0:
            self.client.wait(left)


def _send(client, topic: str, history: History, value: bytes, partition: int) -> None:
    def on_ack(partition: int, offset: int) -> None:
        history.acked[value] = (partition, offset)

    def on_fail(error: str) -> None:
        history.failed[value] = error

    history.sent.append(value)
    client.send(topic, value, partition, on_ack, on_fail)


class TransactionalWorkload:
    """Transactions of `size` values `b"<prefix>-<n>"`, round-robin over the partitions, each
    committed or, with probability `abort_ratio` (drawn from `seed`), aborted, until `count`
    values, `duration_s`, or stop(); about `rate_per_s` values a second. Each transaction's
    outcome is what the producer learnt (checker.Transactions):

    - committed: commit answered (retried while the error was retriable);
    - contradicted: commit answered although a send of the transaction had failed (a client
      bug: kafka-python 3.0 does it);
    - aborted: abort answered (the values sent and answered first, so an aborted transaction
      leaves records in the log), or the producer gave up before asking for the commit (a new
      producer of the same transactional id then aborts it, or the coordinator does at the
      transaction timeout);
    - unknown: the commit was asked for and neither it nor an abort was answered; the producer
      is replaced (its successor's InitProducerId completes or aborts the transaction).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        transactional_id: str,
        count: int,
        duration_s: float,
        rate_per_s: float = 100.0,
        size: int = 10,
        abort_ratio: float = 0.2,
        seed: int = 0,
        end_timeout_s: float = 30.0,
        prefix: str = "t",
        config: dict | None = None,
        client: str = CONFLUENT,
    ) -> None:
        self.bootstrap, self.topic, self.partitions, self.count = bootstrap, topic, partitions, count
        self.duration_s, self.interval_s, self.size = duration_s, size / rate_per_s, size
        self.abort_ratio, self.end_timeout_s = abort_ratio, end_timeout_s
        self.prefix, self.client_name = prefix, client
        id_key = "transactional.id" if client == CONFLUENT else "transactional_id"
        self.transactional_id = transactional_id
        self.config = {id_key: transactional_id, **(config or {})}
        self._gave_up = False  # the last transaction's abort went unanswered
        self.rng = random.Random(seed)
        self.transactions = Transactions()
        self.producers = 0  # how many producer instances it took (one more after each unknown outcome)
        self.phase = "starting"  # what the thread is doing, for state()
        self._stop = threading.Event()
        self.error: BaseException | None = None  # what ended the thread, if not its end
        self._thread = threading.Thread(target=_recorded(self, self._run), name=f"transactions-{prefix}-{topic}",
                                        daemon=True)

    def start(self) -> "TransactionalWorkload":
        self._thread.start()
        return self

    def stop(self) -> Transactions:
        self.request_stop()
        return self.join()

    def request_stop(self) -> None:
        """No new transaction (the one under way ends); join() waits for the end."""
        self._stop.set()

    def join(self) -> Transactions:
        self._thread.join(self.duration_s + 4 * self.end_timeout_s + 30)
        assert not self._thread.is_alive(), f"the transactional workload {self.prefix} did not end in time"
        assert self.error is None, f"the transactional workload {self.prefix} failed: {self.error!r}"
        return self.transactions

    @property
    def committed_count(self) -> int:
        return len(self.transactions.committed)

    def state(self) -> str:
        """What the workload is doing, for a report on a stalled one."""
        return f"{self.prefix}: {self.committed_count} committed, {len(self.transactions.aborted)} aborted, " \
               f"{len(self.transactions.unknown)} unknown, producer #{self.producers}, {self.phase}"

    def _new_client(self, deadline: float):
        """A producer with its transactions initialised (retried until `deadline`), or None."""
        while time.monotonic() < deadline and not self._stop.is_set():
            client = _CLIENTS[self.client_name](self.bootstrap, self.config)
            self.producers += 1
            self.phase = "initialising transactions"
            try:
                client.init(self.end_timeout_s)
                return client
            except Exception as error:  # noqa: BLE001 (whatever the client raises: start afresh)
                self.phase = f"initialising transactions, last failure: {error!r}"
                client.close()
                time.sleep(1)
        return None

    def _run(self) -> None:
        deadline = time.monotonic() + self.duration_s
        client = self._new_client(deadline)
        pace = _Pace(client, self.interval_s) if client else None
        n = 0
        try:
            while client is not None and n < self.count and not self._stop.is_set() and time.monotonic() < deadline:
                values = [f"{self.prefix}-{n + i}".encode() for i in range(self.size)]
                outcome = self._transaction(client, values, n)
                n += self.size
                getattr(self.transactions, outcome).append(values)
                if outcome == "unknown" or (outcome == "aborted" and self._gave_up):
                    client.close()
                    client = self._new_client(deadline)
                    pace = _Pace(client, self.interval_s) if client else None
                if pace:
                    pace.wait()
        finally:
            if client is not None:
                client.close()

    def _transaction(self, client, values: list[bytes], first: int) -> str:
        self._gave_up = False
        history = self.transactions.history
        self.phase = f"sending {values[0].decode()}.."
        try:
            client.begin()
            for i, value in enumerate(values):
                _send(client, self.topic, history, value, (first + i) % self.partitions)
        except Exception:  # noqa: BLE001
            return self._abort(client)
        if self.rng.random() < self.abort_ratio:
            # Written first, so that readers must skip an aborted transaction's records in the
            # log (the transaction index) rather than never see them sent.
            self.phase = f"flushing {values[0].decode()}.. before aborting"
            client.flush(self.end_timeout_s)
            return self._abort(client)
        give_up = time.monotonic() + 2 * self.end_timeout_s
        while True:
            self.phase = f"committing {values[0].decode()}.."
            try:
                client.commit(self.end_timeout_s)
                return "contradicted" if any(value in history.failed for value in values) else "committed"
            except Exception as error:  # noqa: BLE001
                if client.retriable(error) and time.monotonic() < give_up:
                    continue
                self.phase = f"aborting {values[0].decode()}.. after a failed commit: {error!r}"
                try:
                    client.abort(self.end_timeout_s)  # refused when the commit went through
                    return "aborted"
                except Exception:  # noqa: BLE001
                    return "unknown"

    def _abort(self, client) -> str:
        """Before any commit was asked for, a transaction can only end aborted."""
        self.phase = "aborting"
        try:
            client.abort(self.end_timeout_s)
        except Exception:  # noqa: BLE001
            self._gave_up = True
        return "aborted"


def stable_ends(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0,
                errors: list[str] | None = None) -> dict[int, int]:
    """partition -> its end once the last stable offset has caught up with the high watermark
    everywhere (no transaction left open), from ListOffsets. ListOffsets errors are retried until
    `timeout_s` and noted in `errors`."""
    consumers = {
        isolation: Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{topic}", "isolation.level": isolation})
        for isolation in ("read_committed", "read_uncommitted")
    }
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                ends = {
                    isolation: {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                                for p in range(partitions)}
                    for isolation, consumer in consumers.items()
                }
                if ends["read_committed"] == ends["read_uncommitted"]:
                    return ends["read_committed"]
                last = f"last stable offsets {ends['read_committed']}, high watermarks {ends['read_uncommitted']}"
            except KafkaException as error:
                last = f"ListOffsets: {error.args[0]}"
                if errors is not None:
                    errors.append(last)
            if time.monotonic() >= deadline:
                raise AssertionError(f"{topic} not stable within {timeout_s} s: {last}")
            time.sleep(0.5)
    finally:
        for consumer in consumers.values():
            consumer.close()


def read_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0, *,
               isolation: str = "read_committed", ends: dict[int, int] | None = None
               ) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic a fresh consumer reads: partition -> [(offset, value)] up to
    `ends` (by default the ends each partition has when reading starts). An offset read twice
    (the client fetched it again) counts once."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"checker-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        if ends is None:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                    for p in range(partitions)}
        wanted = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        read: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while wanted:
            if time.monotonic() >= deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout_s} s: {wanted} left")
            message = consumer.poll(0.5)
            if message is None:
                continue
            partition = message.partition()
            if message.error() is not None:
                # Errors during faults are passing (the client retries); the deadline bounds them.
                at_end = message.error().code() == KafkaError._PARTITION_EOF
                if at_end and message.offset() >= ends[partition]:
                    wanted.discard(partition)
                continue
            if message.offset() < ends[partition]:
                earlier = read[partition].setdefault(message.offset(), message.value())
                assert earlier == message.value(), (
                    f"{topic}-{partition} offset {message.offset()} read as {earlier!r}, then as {message.value()!r}")
            if message.offset() + 1 >= ends[partition]:
                wanted.discard(partition)
        return {p: sorted(records.items()) for p, records in read.items()}
    finally:
        consumer.close()
