"""logway-mirror: mirror topics between Kafka clusters, exactly once (docs/mirroring.md).

    logway-mirror mirror.properties [--log-level INFO]

Runs every enabled flow of the file in a thread of its own, and the heartbeat emitter; a cluster
that cannot be reached is retried every second (after its 30 s timeouts). SIGTERM or SIGINT stops
it after the transactions in progress (up to those 30 s while a cluster is unreachable); a kill
at any other moment loses nothing either (flow.MirrorFlow). Exit status: 0 after a stop, 1 when a flow failed for good (fenced by
another instance of itself, or an unexpected error), 2 on a configuration error.
"""

import argparse
import logging
import signal
import sys
import threading

from replication.mirror.config import MirrorConfigError, load
from replication.mirror.flow import FlowStopped, MirrorFlow
from replication.mirror.heartbeats import HeartbeatEmitter
from replication.mirror.policy import ReplicationPolicy

log = logging.getLogger("logway.mirror")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="logway-mirror", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="properties file in MirrorMaker 2's vocabulary")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load(args.config)
    except MirrorConfigError as exc:
        print(f"logway-mirror: {exc}", file=sys.stderr)
        return 2
    if not config.flows:
        print("logway-mirror: no flow is enabled (set <source>-><target>.enabled = true)", file=sys.stderr)
        return 2

    stop = threading.Event()
    failed = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    policy = ReplicationPolicy(config.separator)

    def run_flow(flow: MirrorFlow) -> None:
        try:
            flow.run()
        except FlowStopped as exc:
            log.error("%s", exc)
            failed.set()
            stop.set()
        except Exception:  # a bug: stop the whole process rather than go on without this flow
            log.exception("%s failed", flow.flow.name)
            failed.set()
            stop.set()

    threads = [
        threading.Thread(target=run_flow, args=(MirrorFlow(flow, policy, stop),), name=flow.name)
        for flow in config.flows
    ]
    heartbeat_flows = [flow for flow in config.flows if flow.emit_heartbeats]
    if heartbeat_flows:
        pairs = []
        for flow in heartbeat_flows:
            for pair in ((flow.source, flow.target), (flow.target, flow.source)):
                if pair not in pairs:
                    pairs.append(pair)
        emitter = HeartbeatEmitter(
            pairs,
            min(flow.heartbeats_interval_s for flow in heartbeat_flows),
            min(flow.replication_factor for flow in heartbeat_flows),
            stop,
        )
        threads.append(threading.Thread(target=emitter.run, name="heartbeats"))
    for thread in threads:
        thread.start()
    log.info("mirroring %s", ", ".join(flow.name for flow in config.flows))
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.5)
    return 1 if failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
