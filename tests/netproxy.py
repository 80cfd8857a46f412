"""A TCP proxy in front of the database that a test can cut, as a database restart would, or
silence, as a network partition would."""

from __future__ import annotations

import socket
import threading


class OutageProxy:
    """Forward 127.0.0.1:<port> to the database; ``cut()`` drops every connection and refuses
    new ones until ``restore()``, which is what clients see while a database restarts.

    ``silence()`` keeps every connection open but forwards nothing either way, and accepts new
    connections without forwarding them, until ``restore()``: what clients see when the network
    drops their packets (a partition, a dead switch, a hung fail-over), with no reset to tell
    them. What was sent meanwhile arrives once restored, as TCP's retransmissions would bring
    it. (The proxy's own sockets acknowledge what they receive, so this shows what a client's
    own timeouts do, not the kernel's keepalives or ``tcp_user_timeout``.)
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.settimeout(0.2)
        self.port: int = self.listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        # Set while not silent: forwarding waits for it.
        self._audible = threading.Event()
        self._audible.set()
        self.silences = 0
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.cuts = 0
        threading.Thread(target=self._accept, name="outage-proxy", daemon=True).start()

    def cut(self) -> None:
        self._up.clear()
        self.cuts += 1
        self._drop_all()

    def silence(self) -> None:
        self.silences += 1
        self._audible.clear()

    def restore(self) -> None:
        self._audible.set()
        self._up.set()

    def close(self) -> None:
        self._closed.set()
        self._drop_all()
        self.listener.close()

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._up.is_set():
                client.close()  # refused while the database is "down"
                continue
            with self._lock:
                self._sockets.add(client)
            if self._audible.is_set():
                self._connect(client)
            else:  # accepted (the client's connect() returns), forwarded once restored
                threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._audible.wait()
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets.add(upstream)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._audible.wait()  # held while silent, as a partition holds it
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
