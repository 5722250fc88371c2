"""Expose a Unix socket (the Docker engine's) on a TCP address, as `dockerd -H tcp://...`
would, so a test can drive the local engine the way a laptop drives a GPU box's: the Docker
API over TCP, to an address that is not the local socket.

    python tests/support/tcp_to_unix.py HOST PORT /var/run/docker.sock

Prints `listening HOST:PORT` once it accepts connections (PORT 0 picks a free one). Each
connection is two byte pumps, one per direction, that pass a half-close on, so the API's
hijacked streams (container logs, exec) behave as over dockerd's own TCP listener.
"""

from __future__ import annotations

import socket
import sys
import threading


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)  # the other side sees end of stream, as it would directly
        except OSError:
            pass


def serve(client: socket.socket, unix_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(unix_path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(host: str, port: int, unix_path: str) -> None:
    listener = socket.create_server((host, port), reuse_port=False)
    print(f"listening {host}:{listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, unix_path), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
