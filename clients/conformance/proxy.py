"""One TCP proxy for every client's worker program (test_conformance.py), between a worker and
the server, that can go silent as a network partition does: every socket stays open and nothing
tells either end, but no byte gets through either way — what is sent meanwhile is lost, so a call
sent into the silence is never answered, even after it heals — and a connection made meanwhile
waits, unanswered, until it heals. Threads and blocking sockets: the suite's tests are plain."""

from __future__ import annotations

import socket
import threading
import urllib.parse
from types import TracebackType


class Partition:
    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        self._url = parts
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._healed = threading.Event()
        self._healed.set()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> Partition:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The server's URL, through the proxy."""
        user = f"{self._url.username}@" if self._url.username else ""
        port = self._listener.getsockname()[1]
        return self._url._replace(netloc=f"{user}127.0.0.1:{port}").geturl()

    def silence(self) -> None:
        self._healed.clear()

    def heal(self) -> None:
        self._healed.set()

    def close(self) -> None:
        """Ends every connection (each end sees it closed) and stops listening."""
        self._closing = True
        self._healed.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _keep(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.append(s)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._healed.wait()  # made in the silence: held, unanswered
        if self._closing:
            return
        try:
            server = socket.create_connection(self._upstream)
        except OSError:
            client.close()
            return
        self._keep(server)
        threading.Thread(target=self._pump, args=(server, client), daemon=True).start()
        self._pump(client, server)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if self._healed.is_set():
                    sink.sendall(data)
            self._healed.wait()  # an end gets through once healed
        except OSError:
            pass
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
