#!/usr/bin/env python3
"""Counts round trips between PostgreSQL clients and the server (benchmark item 5).

A TCP proxy: listens on 127.0.0.1:<free port>, forwards to --upstream HOST:PORT, prints its port on
stdout once it listens, and on SIGTERM/SIGINT writes a JSON report to --report.

Per client connection it records
  - turns: how many times the client sent bytes after having received bytes from the server
    since its previous send. For a request/response protocol this is the number of network round
    trips the client waited on, including the connection start-up (SSL request, startup, SASL).
  - messages: every frontend message after start-up, decoded by type: Query (Q) text, Parse (P)
    text, Bind (B), Execute (E), Describe (D), Sync (S), Terminate (X).
  - syncs: Query + Sync messages, i.e. protocol-level request boundaries.
  - round_trips: requests the client waits on after start-up: each simple Query, and each Sync
    group (Parse/Bind/Describe/Execute... then Sync) except groups holding only Close, which
    tokio-postgres sends without waiting (close_only_syncs). Independent of timing.
  - startup_turns: turns that only carried SSLRequest/StartupMessage/password (SASL) messages;
    query_turns: turns that carried a Query or a Sync (the SQL round trips). Terminate (X) alone
    is neither: the client does not wait for an answer.
Only standard library; no dependencies.
"""
import argparse
import asyncio
import json
import signal
import struct
import time

CONNS = []


class Conn:
    def __init__(self, cid):
        self.cid = cid
        self.turns = 0
        self.server_spoke = True  # the first client send counts as a turn
        self.messages = []
        self.turn_kinds = []  # per turn: the message types the client sent in it
        self.group = []  # extended-protocol messages since the last Sync
        self.round_trips = 0  # Query, or a Sync group with anything but Close in it
        self.close_only = 0  # Close+Sync groups: fire-and-forget statement cleanup
        self.startup_done = False
        self.buf = b""
        self.opened = time.monotonic()
        self.closed = None

    def client_data(self, data):
        if self.server_spoke:
            self.turns += 1
            self.server_spoke = False
            self.turn_kinds.append([])
        self.buf += data
        self.parse()

    def server_data(self, _data):
        self.server_spoke = True

    def parse(self):
        while True:
            if not self.startup_done:
                # SSLRequest / GSSENCRequest / StartupMessage: int32 length, no type byte.
                if len(self.buf) < 8:
                    return
                (length,) = struct.unpack("!I", self.buf[:4])
                if len(self.buf) < length:
                    return
                (code,) = struct.unpack("!I", self.buf[4:8])
                self.buf = self.buf[length:]
                if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                    self.messages.append({"type": "SSLRequest"})
                    self.turn_kinds[-1].append("SSLRequest")
                    continue
                self.messages.append({"type": "Startup"})
                self.turn_kinds[-1].append("Startup")
                self.startup_done = True
                continue
            if len(self.buf) < 5:
                return
            kind = chr(self.buf[0])
            (length,) = struct.unpack("!I", self.buf[1:5])
            if len(self.buf) < 1 + length:
                return
            body = self.buf[5 : 1 + length]
            self.buf = self.buf[1 + length :]
            msg = {"type": kind}
            if kind == "Q":
                msg["sql"] = body.rstrip(b"\0").decode("utf-8", "replace")
            elif kind == "P":
                name_end = body.index(b"\0")
                sql_end = body.index(b"\0", name_end + 1)
                msg["sql"] = body[name_end + 1 : sql_end].decode("utf-8", "replace")
            self.messages.append(msg)
            self.turn_kinds[-1].append(kind)
            if kind == "Q":
                self.round_trips += 1
            elif kind == "S":
                if self.group and all(k == "C" for k in self.group):
                    self.close_only += 1
                else:
                    self.round_trips += 1
                self.group = []
            elif kind != "X":
                self.group.append(kind)

    def report(self):
        kinds = [m["type"] for m in self.messages]
        startup = sum(
            1 for t in self.turn_kinds if t and all(k in ("SSLRequest", "Startup", "p") for k in t)
        )
        return {
            "id": self.cid,
            "turns": self.turns,
            "startup_turns": startup,
            "round_trips": self.round_trips,
            "close_only_syncs": self.close_only,
            "query_turns": sum(1 for t in self.turn_kinds if t and any(k in ("Q", "S") for k in t)),
            "syncs": sum(1 for k in kinds if k in ("Q", "S")),
            "statements": [m["sql"] for m in self.messages if "sql" in m],
            "messages": "".join(k if len(k) == 1 else "<" + k + ">" for k in kinds),
            "seconds": (self.closed or time.monotonic()) - self.opened,
        }


async def pump(reader, writer, on_data):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            on_data(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            pass


async def handle(client_reader, client_writer, upstream):
    conn = Conn(len(CONNS) + 1)
    CONNS.append(conn)
    host, port = upstream
    server_reader, server_writer = await asyncio.open_connection(host, port)
    await asyncio.gather(
        pump(client_reader, server_writer, conn.client_data),
        pump(server_reader, client_writer, conn.server_data),
    )
    conn.closed = time.monotonic()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, help="HOST:PORT")
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    upstream = (host, int(port))
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, upstream), "127.0.0.1", 0
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    with open(args.report, "w", encoding="utf-8") as out:
        json.dump([c.report() for c in CONNS], out, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
