"""A TCP proxy whose network can be cut and healed, and closing a socket both ways."""

import socket
import threading


class CuttableProxy:
    """A TCP proxy to one port, standing for the network between a client and a server (the
    mirror and a cluster, a broker and ZooKeeper). `cut` drops every connection through it and,
    until `heal`, drops new ones as soon as they are accepted: the clients see connections lost
    and refused. A broker behind it must advertise the proxy's address on the listener used.

    Threads: one accepting, two per connection; daemons, ended by closing their sockets."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._upstream_port = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False

    def start(self, upstream_port: int) -> "CuttableProxy":
        self._upstream_port = upstream_port
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            shut(sock)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self.cut()
        shut(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    shut(client)
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self._upstream_port), timeout=5)
                except OSError:
                    shut(client)
                    continue
                upstream.settimeout(None)
                self._sockets += [client, upstream]
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    shut(source)
    shut(sink)


def shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
