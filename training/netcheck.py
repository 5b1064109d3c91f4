"""Connectivity preflight: hold a node's task ports open so the others can try them.

Before a run, ``train.yml`` starts ``python -m training listen`` on every node
for the ports of its tasks, then has every node open a TCP connection to every
task's host:port. A firewall or a routing problem shows up then, naming both
hosts and the port, instead of as a cluster that silently never forms.
"""

from __future__ import annotations

import selectors
import socket
import time
from pathlib import Path


class NetCheckError(RuntimeError):
    """A port that cannot be listened on (usually: already in use)."""


def listen(ports: list[int], seconds: float, stop_file: Path | None = None) -> int:
    """Accept and close connections on ``ports`` until ``seconds`` pass or ``stop_file`` exists.

    Args:
        ports: TCP ports, bound on every address.
        seconds: the most time to listen, in seconds.
        stop_file: when this file appears, stop at once.

    Returns:
        0 after listening.

    Raises:
        NetCheckError: a port is in use (another run, or another program).
    """
    selector = selectors.DefaultSelector()
    socks = []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("", port))
            except OSError as err:
                raise NetCheckError(
                    f"port {port} is in use ({err.strerror}); a run still going, or another program"
                ) from None
            sock.listen(64)
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
            socks.append(sock)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (stop_file and stop_file.exists()):
            for key, _ in selector.select(timeout=0.2):
                conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                conn.close()
        return 0
    finally:
        for sock in socks:
            sock.close()
        selector.close()
