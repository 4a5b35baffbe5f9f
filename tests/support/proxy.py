"""A TCP proxy on loopback: a second address for one server, which a test can kill mid-run."""

from __future__ import annotations

import asyncio
import contextlib

from prime_rl.dev.server import free_port


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_port``; :meth:`kill` drops every connection at once."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.awaiting = 0
        """Connections whose last bytes went to the server: a request sent and not yet answered
        (its reply has not begun), the moment to kill it in flight."""

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        waiting = False  # this connection's state, counted in self.awaiting

        def mark(up: bool) -> None:
            nonlocal waiting
            if up != waiting:
                waiting = up
                self.awaiting += 1 if up else -1

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(65536):
                    mark(up)
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        finally:
            mark(False)

    async def kill(self) -> None:
        """Stop listening and cut every open connection (a server dying mid-request)."""
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._writers.clear()
