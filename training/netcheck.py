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


def check_own_address(host: str) -> None:
    """Refuse a task host that is not this machine, for a run whose tasks all start here.

    The local launcher starts every task on this machine, and the tasks connect
    to each other at the addresses of the cluster spec: a host that is another
    machine's address leaves the cluster unformed until the startup timeout.
    The test binds a socket to each of the host's addresses, port 0: the kernel
    refuses an address that no interface of this machine holds (EADDRNOTAVAIL,
    bind(2)); 127.0.0.0/8 and ::1 are always this machine's.

    Args:
        host: a task address's host part: a name, an IPv4 or an IPv6 address.

    Raises:
        NetCheckError: ``host`` does not resolve here, or none of its addresses
            is this machine's.
    """
    fix = (
        "Fix: leave tf_cluster_address out of this host's inventory variables "
        "(its tasks then use 127.0.0.1), or give one of this machine's addresses"
    )
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise NetCheckError(
            f"tf_cluster_address {host} does not resolve here ({err}). {fix}"
        ) from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.bind(sockaddr)
            except OSError:
                continue
            return
    raise NetCheckError(
        f"tf_cluster_address {host} is not an address of this machine, yet a local run starts "
        "every task here and the tasks connect to each other at that address (they would wait "
        f"for each other until training_run_startup_timeout). {fix}"
    )


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
