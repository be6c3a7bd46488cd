"""A delaying TCP proxy on 127.0.0.1: each chunk crosses after DELAY seconds, and round trips are counted.

A link with latency, in one thread running an asyncio loop: every chunk read from one side is written
to the other DELAY seconds later (10 ms each way: a 20 ms round trip), in order, without the delays
adding up (a chunk read while another waits is due DELAY after its own arrival). Per connection it
counts the client's turns: a client chunk that follows data from the server (or opens the
connection) starts a new round trip, so a command that asks N questions one after another, each
waiting for its answer, counts N. Bytes are counted in each direction.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time


class DelayProxy:
    """127.0.0.1:port -> 127.0.0.1:upstream, DELAY seconds each way; started at construction."""

    def __init__(self, upstream: int, delay: float = 0.010) -> None:
        self.upstream = upstream
        self.delay = delay
        self.round_trips = 0
        self.bytes_up = self.bytes_down = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            client_w.close()
            return
        self.connections += 1
        last = ["down"]  # the direction of the last chunk: a client chunk after "down" is a new turn
        try:
            await asyncio.gather(
                self._pump(client_r, server_w, "up", last), self._pump(server_r, client_w, "down", last)
            )
        except asyncio.CancelledError:  # the proxy closing with connections still open (held SSH links)
            pass
        for writer in (client_w, server_w):
            writer.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str, last: list[str]
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer))
        try:
            while data := await reader.read(1 << 16):
                if way == "up":
                    if last[0] == "down":
                        self.round_trips += 1
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)
                last[0] = way
                queue.put_nowait((time.monotonic() + self.delay, data))
        except OSError:
            pass
        queue.put_nowait((time.monotonic() + self.delay, b""))
        await sender

    @staticmethod
    async def _send(queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            try:
                if writer.can_write_eof():
                    writer.write_eof()
            except OSError:
                pass

    def counts(self) -> tuple[int, int, int]:
        """(round trips, bytes up, bytes down) so far."""
        return self.round_trips, self.bytes_up, self.bytes_down

    def cpu(self) -> float:
        """CPU seconds the proxy's thread has spent so far (the link's own work, on this machine's cores)."""
        with open(f"/proc/self/task/{self._thread.native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
