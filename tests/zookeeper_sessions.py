"""ZooKeeper sessions for tests that expire them."""

from kazoo.client import KazooClient


def expire_session(connect: str, session: tuple[int, bytes]) -> None:
    """ZooKeeper's way to expire a session from outside: open it again elsewhere and close it.
    Blocking: call it in a thread from the loop."""
    other = KazooClient(hosts=connect, client_id=session, timeout=4)
    other.start(10)
    other.stop()
    other.close()
