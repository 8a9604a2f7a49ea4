"""The load generator as the balancer of a `replicas` mode: requests spread over the replicas by the
generator itself, where no nginx stands in front of them (servebench/planning/balancing.py decides).

Least outstanding requests first: each request goes to the replica with the fewest requests in flight
from this generator, ties broken in turn (the replica after the last one picked first), which is what
nginx's `least_conn` does with one worker; `round-robin` takes the replicas in turn whatever they hold.
The generator is the replicas' only client in a cell, so its own count is each replica's load. The pick
is made when a request is sent (after a concurrency cap let it go), not when it was scheduled, and each
request's record names its replica (`RequestRecord.replica`), so the balance is read from the requests.

One connection pool per replica: a kept-alive connection belongs to one server.
"""

from __future__ import annotations

from collections.abc import Mapping

from servebench.load.config import LoadConfig
from servebench.load.http import ConnectionPool, Endpoint, stream_request
from servebench.load.records import RequestRecord

POLICIES = ("least-connections", "round-robin")


class ReplicaPicker:
    """Which replica takes the next request, and how many each has in flight and has been sent."""

    def __init__(self, count: int, policy: str = "least-connections"):
        if count < 1:
            raise ValueError("a picker needs at least one replica")
        if policy not in POLICIES:
            raise ValueError(f"replica policy {policy!r}: one of {', '.join(POLICIES)}")
        self.policy = policy
        self.in_flight = [0] * count
        self.sent = [0] * count
        self._next = 0   # where a tie is broken from: the replica after the last one picked

    def pick(self) -> int:
        """The replica for a request about to be sent (counted in flight until `done`)."""
        count = len(self.in_flight)
        index = self._next
        if self.policy == "least-connections":
            fewest = min(self.in_flight)
            index = next(i for i in ((self._next + k) % count for k in range(count)) if self.in_flight[i] == fewest)
        self._next = (index + 1) % count
        self.in_flight[index] += 1
        self.sent[index] += 1
        return index

    def done(self, index: int) -> None:
        """The request sent to `index` is over (answered, failed or timed out)."""
        if self.in_flight[index] <= 0:
            raise ValueError(f"replica {index} has no request in flight")
        self.in_flight[index] -= 1


class Targets:
    """Where a run's requests go: one server (`base_url`), or a replicas mode's servers by name, picked per
    request. Each has its endpoint (its request head: host, key) and its connection pool."""

    def __init__(self, urls: Mapping[str | None, str], path: str, token_counts: list[str],
                 cache_tokens: list[str] | None = None, policy: str = "least-connections"):
        self.names = list(urls)
        self.endpoints = [Endpoint(url.rstrip("/") + path, token_counts, cache_tokens) for url in urls.values()]
        self.pools = [ConnectionPool(endpoint) for endpoint in self.endpoints]
        self.picker = ReplicaPicker(len(self.names), policy)

    async def stream(self, body: bytes, record: RequestRecord, timeout_s: float) -> None:
        """Send one request to the replica picked now and stream its answer into `record` (naming the replica)."""
        index = self.picker.pick() if len(self.names) > 1 else 0
        record.replica = self.names[index]
        try:
            await stream_request(self.pools[index], self.endpoints[index].request_bytes(body), record, timeout_s)
        finally:
            if len(self.names) > 1:
                self.picker.done(index)

    def close(self) -> None:
        for pool in self.pools:
            pool.close()


def targets_for(config: LoadConfig, path: str) -> Targets:
    """The config's replicas (`replica_urls`, by `replica_policy`), else its one server (`base_url`)."""
    urls: dict[str | None, str] = {name: url for name, url in config.replica_urls.items()} or {None: config.base_url}
    return Targets(urls, path, config.stream_token_counts, config.prompt_cache_tokens, config.replica_policy)


def requests_per_replica(records: list[RequestRecord], names: list[str]) -> dict[str, int]:
    """Requests each replica was sent (warm-up ones too, as nginx's access log counts them), every one named."""
    counts = dict.fromkeys(names, 0)
    for record in records:
        if record.replica in counts:
            counts[record.replica] += 1
    return counts
