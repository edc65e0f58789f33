"""A ZooKeeper client in a process of its own, for the harness tests (harness.ZooKeeperProbe).

    python tests/cluster/zk_probe.py --connect HOST:PORT[/chroot] --ephemeral /path [--session-timeout-ms N]

Connects with kazoo, creates the ephemeral znode, and prints one line per event until SIGTERM:
"state CONNECTED|SUSPENDED|LOST" at every session state change, then "session 0x<id> <path>"
once the znode exists. Kazoo reconnects by itself (within half a second, so a healed network
shows quickly); after LOST it does so with a new session, without the znode.
"""

import argparse
import signal
import threading

from kazoo.client import KazooClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connect", required=True)
    parser.add_argument("--ephemeral", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=2000)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client = KazooClient(
        hosts=args.connect,
        timeout=args.session_timeout_ms / 1000,
        connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 0.5},
    )
    client.add_listener(lambda state: print(f"state {state}", flush=True))
    client.start(timeout=30)
    client.create(args.ephemeral, ephemeral=True, makepath=True)
    print(f"session {client.client_id[0]:#x} {args.ephemeral}", flush=True)
    stop.wait()
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
