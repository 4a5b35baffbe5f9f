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
        self.killed_in_flight = asyncio.Event()
        """Set when :meth:`kill_in_flight` fired."""
        self._kill_armed = False

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

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                    if up and self._kill_armed and data.startswith(b"POST"):  # a request just went
                        # to the server (not a health check): cut it now
                        self._kill_armed = False
                        self._cut()
                        self.killed_in_flight.set()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

    def kill_in_flight(self) -> None:
        """Arm a :meth:`kill` for the moment a POST's bytes have gone to the server: it dies with
        that request in flight, whenever the request comes (a poll of the requests waiting for
        their reply can miss one answered in a few milliseconds)."""
        self._kill_armed = True

    async def kill(self) -> None:
        """Stop listening and cut every open connection (a server dying mid-request)."""
        self._cut()

    def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._writers.clear()
