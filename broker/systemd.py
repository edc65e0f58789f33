"""systemd's readiness protocol (sd_notify), without libsystemd: with `Type=notify` in the unit
(config/logway.service) systemd sets NOTIFY_SOCKET and waits for READY=1 before it counts the
broker as started, so units ordered after it start once it serves.

The broker sends READY=1 once it serves (its log dirs loaded; in cluster mode, registered in
ZooKeeper) and STOPPING=1 when it begins its clean shutdown. Without NOTIFY_SOCKET (not under
systemd, or Type=simple) nothing is sent. A failure to send is logged, never fatal.
"""

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send `state` ("READY=1", "STOPPING=1" ...) to systemd; False when not asked for."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("cannot tell systemd %s: %s", state, exc)
        return False
    return True
