"""A JetStream cluster of nats-servers on one host: for tests and for trying
replicated (R3) streams locally. Each node is a :class:`NatsServer` with its
own store dir, client port (chosen by the server) and route port.

::

    with NatsCluster(".laneledger/cluster", size=3) as cluster:
        cluster.urls                 # ["nats://127.0.0.1:41873", ...], one per node
        cluster.kill(1)              # SIGKILL node 1 (its store stays)
        cluster.start_node(1)        # it rejoins on the same ports and store
        cluster.wait_for_meta_leader()

Every node routes to every other (a JetStream cluster needs configured
routes). nats-server cannot pick route ports itself when the nodes must
name each other's up front, so they are chosen here: asked of the kernel
(bind to port 0) all at once, released just before the servers bind them; if
another process takes one in that instant the start fails with "address
already in use" and is retried with new ports. Once started, the ports stay,
so a node restarts where its peers expect it.

Clients connect to any node; nats-py learns the others from the cluster and
fails over to them when its node goes away. Given all of ``urls`` (for
``--nats``: comma-joined) a process also starts while a node is down.

``python -m laneledger.devtools.natscluster [--dir DIR] [--size 3]`` runs one in the
foreground and prints the nodes' URLs.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from laneledger.devtools.natsserver import NatsServer, NatsServerError

__all__ = ["NatsCluster"]

_META_LEADER = re.compile(
    r"JetStream cluster new metadata leader|Self is new JetStream cluster metadata leader"
)
_START_ATTEMPTS = 3


def _free_ports(n: int, host: str) -> list[int]:
    """``n`` distinct ports nothing listens on now (held together, then released)."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


class NatsCluster:
    """``size`` nats-servers with JetStream, clustered as ``name`` on ``host``,
    storing under ``base_dir/n<i>`` and logging to ``base_dir/n<i>.log``.
    ``no_advertise``: the nodes do not tell clients about each other, so a
    client reaches only the servers it was given."""

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        size: int = 3,
        *,
        name: str = "laneledger",
        host: str = "127.0.0.1",
        binary: str | os.PathLike[str] | None = None,
        no_advertise: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.base_dir = Path(base_dir)
        self.size = size
        self.name = name
        self.host = host
        self.binary = binary
        self.no_advertise = no_advertise
        self.route_ports: list[int] = []
        self.nodes: list[NatsServer] = []

    # -- what it is ----------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def node_name(self, i: int) -> str:
        return f"n{i}"

    def __repr__(self) -> str:
        return f"<NatsCluster {self.name} {self.nodes!r}>"

    # -- start, stop ------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start every node and wait until the cluster has a JetStream meta leader."""
        for attempt in range(_START_ATTEMPTS):
            self._configure(_free_ports(self.size, self.host))
            try:
                for i in range(self.size):
                    self.nodes[i].start(timeout)
                break
            except NatsServerError as exc:
                self.stop()
                if "address already in use" not in str(exc) or attempt == _START_ATTEMPTS - 1:
                    raise
        self.wait_for_meta_leader(timeout=timeout)
        return self

    def _configure(self, route_ports: list[int]) -> None:
        self.route_ports = route_ports
        routes = ",".join(f"nats://{self.host}:{p}" for p in route_ports)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = [
            NatsServer(
                self.base_dir / self.node_name(i),
                host=self.host,
                binary=self.binary,
                log_path=self.base_dir / f"{self.node_name(i)}.log",
                extra_args=(
                    "--name",
                    self.node_name(i),
                    "--cluster_name",
                    self.name,
                    "--cluster",
                    f"nats://{self.host}:{port}",
                    "--routes",
                    routes,
                    *(("--no_advertise=true",) if self.no_advertise else ()),
                ),
            )
            for i, port in enumerate(route_ports)
        ]

    def start_node(self, i: int, timeout: float = 30.0) -> NatsServer:
        """Start node ``i`` again (same ports, same store): it rejoins."""
        offset = self._log_size(i)
        self.nodes[i].start(timeout)
        self.wait_for_meta_leader(nodes=[i], offsets={i: offset}, timeout=timeout)
        return self.nodes[i]

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``, like a crash; its store stays for a restart."""
        self.nodes[i].kill()

    def stop_node(self, i: int, timeout: float = 10.0) -> None:
        self.nodes[i].stop(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        for node in self.nodes:
            node.stop(timeout)

    def _log_size(self, i: int) -> int:
        path = self.nodes[i].log_path
        return path.stat().st_size if path.exists() else 0

    def wait_for_meta_leader(
        self,
        *,
        nodes: Sequence[int] | None = None,
        offsets: dict[int, int] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Wait until each of ``nodes`` (default: all running) has logged a
        JetStream meta leader (after ``offsets[i]`` in its log)."""
        wanted = [i for i in (nodes if nodes is not None else range(self.size)) if self.nodes[i].running]
        offsets = offsets or {}
        deadline = time.monotonic() + timeout
        while True:
            missing = []
            for i in wanted:
                with open(self.nodes[i].log_path, "rb") as log:
                    log.seek(offsets.get(i, 0))
                    if not _META_LEADER.search(log.read().decode("utf-8", errors="replace")):
                        missing.append(i)
            if not missing:
                return
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"nodes {[self.node_name(i) for i in missing]} saw no JetStream meta leader "
                    f"within {timeout:g}s; last lines of {self.nodes[missing[0]].log_path}:\n"
                    f"{self.nodes[missing[0]].log_tail()}"
                )
            time.sleep(0.05)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


# -- python -m laneledger.devtools.natscluster ------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run a local cluster in the foreground until Ctrl-C or SIGTERM."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m laneledger.devtools.natscluster", description=main.__doc__
    )
    parser.add_argument("--dir", default=".laneledger/cluster", help="store dirs and logs go here")
    parser.add_argument("--size", type=int, default=3)
    args = parser.parse_args(argv)

    def _terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    cluster = NatsCluster(args.dir, size=args.size)
    try:
        with cluster:
            print(" ".join(cluster.urls), flush=True)
            while all(node.running for node in cluster.nodes):
                time.sleep(0.5)
            print(
                f"a node exited:\n{next(n for n in cluster.nodes if not n.running).log_tail()}",
                file=sys.stderr,
            )
            return 1
    except KeyboardInterrupt:
        return 0
    except NatsServerError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
