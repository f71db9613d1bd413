#!/usr/bin/env python3
"""Byte forwarders between the host's loopback and the node's network namespace (scripts/node.sh).

    scripts/node-forward.py READY_FILE LISTEN=TARGET...

LISTEN is `tcp:HOST:PORT` or `unix:PATH`; TARGET is `tcp:HOST:PORT`, `unix:PATH`, or
`connect:CIDR,CIDR...`: an HTTP CONNECT proxy (what kube-apiserver's egress selector speaks) that
opens the connection each request names, from the network namespace it runs in, when the address
is inside one of the CIDRs, and refuses any other. A Unix socket is a file: one end listens on one
side of the namespace boundary and the other end connects to it from the other side, so no route
is added anywhere. READY_FILE is written once every listener is open.
"""

import asyncio
import ipaddress
import os
import signal
import sys

BUFFER = 65536


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(BUFFER)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def splice(client_reader, client_writer, target_reader, target_writer):
    await asyncio.gather(
        pipe(client_reader, target_writer), pipe(target_reader, client_writer)
    )
    for writer in (client_writer, target_writer):
        writer.close()


async def open_target(target):
    kind, _, rest = target.partition(":")
    if kind == "unix":
        return await asyncio.open_unix_connection(rest)
    host, _, port = rest.rpartition(":")
    return await asyncio.open_connection(host.strip("[]"), int(port))


def forward(target):
    async def handle(reader, writer):
        try:
            target_reader, target_writer = await open_target(target)
        except OSError as error:
            print(f"node-forward: {target}: {error}", file=sys.stderr, flush=True)
            writer.close()
            return
        await splice(reader, writer, target_reader, target_writer)

    return handle


def connect_proxy(networks):
    async def handle(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.close()
            return
        request = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        status, target = b"400 Bad Request", None
        if len(request) == 3 and request[0] == "CONNECT":
            host, _, port = request[1].rpartition(":")
            try:
                address = ipaddress.ip_address(host.strip("[]"))
                if any(address in network for network in networks):
                    target = (str(address), int(port))
                else:
                    status = b"403 Forbidden"
            except ValueError:
                status = b"403 Forbidden"
        if target is None:
            writer.write(b"HTTP/1.1 " + status + b"\r\n\r\n")
            writer.close()
            return
        try:
            target_reader, target_writer = await asyncio.open_connection(*target)
        except OSError as error:
            writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{error}".encode())
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await splice(reader, writer, target_reader, target_writer)

    return handle


async def listen(spec, handler):
    kind, _, rest = spec.partition(":")
    if kind == "unix":
        if os.path.exists(rest):
            os.unlink(rest)
        return await asyncio.start_unix_server(handler, rest)
    host, _, port = rest.rpartition(":")
    return await asyncio.start_server(handler, host.strip("[]"), int(port), reuse_address=True)


async def main(ready_file, specs):
    servers = []
    for spec in specs:
        listen_spec, _, target = spec.partition("=")
        if target.startswith("connect:"):
            networks = [ipaddress.ip_network(c) for c in target[len("connect:"):].split(",")]
            handler = connect_proxy(networks)
        else:
            handler = forward(target)
        servers.append(await listen(listen_spec, handler))
    with open(ready_file + ".tmp", "w") as ready:
        ready.write(f"{os.getpid()}\n")
    os.rename(ready_file + ".tmp", ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: node-forward.py READY_FILE LISTEN=TARGET...")
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2:]))
    except OSError as error:
        sys.exit(f"node-forward: {error}")
