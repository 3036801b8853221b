"""Leader election on a coordination.k8s.io/v1 Lease (the rules are in tfop/kube/lease.py).

One replica reconciles; the others keep their caches warm and try for the Lease every retry
period. The leader renews every retry period; when it has not renewed within the renew
deadline it stops writing (KubeClient's write gate asks `may_write`) and `run` raises
LeadershipLost, so the process exits and comes back as a standby. On a clean stop, `stop` ends
`run` between attempts and `release` hands the Lease over at once.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from tfop.kube import lease
from tfop.kube.client import ApiError, KubeClient
from tfop.kube.kubeconfig import ConfigError
from tfop.kube.lease import LEASE_API, LEASE_PLURAL, LeaseRecord, LeaseTiming

log = logging.getLogger("tfop.leader")


class LeadershipLost(Exception):
    """The Lease could not be renewed in time: another replica may lead from now on."""


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, timing: LeaseTiming,
                 clock: Callable[[], float] = time.monotonic):
        self.client, self.namespace, self.name, self.identity = client, namespace, name, identity
        self.timing, self.clock = timing, clock
        self.leading = asyncio.Event()
        self._renewed_at: float | None = None  # when our last successful write of the Lease was sent
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._lease: dict | None = None  # the Lease as last read or written (for its resourceVersion)
        self._stopping = asyncio.Event()

    def may_write(self) -> bool:
        return lease.may_write(self._renewed_at, self.clock(), self.timing)

    def stop(self) -> None:
        """Ask `run` to return before its next attempt. An attempt under way is finished, not cut off:
        a request cancelled mid-way is an error in the apiserver's log and leaves the Lease unknown."""
        self._stopping.set()

    async def run(self) -> None:
        """Wait to lead, then renew until that fails; returns only once `stop` is asked."""
        log.info("waiting to lead: Lease %s/%s, identity %s", self.namespace, self.name, self.identity)
        while not await self._try():
            # Spread below the period, not above (client-go's way): a released Lease is taken within 2 s.
            if await self._rest(self.timing.retry_period * (1 - lease.RETRY_JITTER * random.random())):
                return
        log.info("leading: acquired Lease %s/%s (transitions %d)", self.namespace, self.name,
                 self._observed.transitions if self._observed else 0)
        self.leading.set()
        while not await self._rest(self.timing.retry_period):
            renewed = await self._try()
            if self._observed is not None and self._observed.holder != self.identity:
                self.leading.clear()
                self._renewed_at = None
                raise LeadershipLost(f"Lease {self.namespace}/{self.name} is held by {self._observed.holder}")
            if not renewed and not self.may_write():
                self.leading.clear()
                raise LeadershipLost(f"could not renew Lease {self.namespace}/{self.name} within "
                                     f"{self.timing.renew_deadline:g}s; stopped writing")

    async def _rest(self, seconds: float) -> bool:
        """Wait `seconds`; True when `stop` was asked meanwhile (or before)."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _try(self) -> bool:
        """One attempt to acquire or renew; True when we hold the Lease now."""
        sent_at = self.clock()
        try:
            # Bounded, so that a hung request cannot outlive the renew deadline unnoticed.
            outcome = await asyncio.wait_for(self._acquire_or_renew(sent_at), self.timing.renew_deadline / 2)
        except ApiError as err:
            if err.status != 409:  # 409: another replica wrote first; its record is read next time
                log.warning("Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        except (TimeoutError, OSError, ConfigError) as err:  # ConfigError: an exec plugin failed
            log.warning("Lease %s/%s: %s: %s", self.namespace, self.name, type(err).__name__, err)
            return False
        if outcome is None:
            return False
        self._lease, self._observed = outcome
        self._observed_at = self._renewed_at = sent_at
        return True

    async def _acquire_or_renew(self, sent_at: float) -> tuple[dict | None, LeaseRecord] | None:
        found = await self.client.get(LEASE_API, LEASE_PLURAL, self.namespace, self.name)
        current = self._observe(found, sent_at)
        record = lease.claim(current, self.identity, self._observed_at, self.clock(), self.timing, micro_time())
        if record is None:
            return None
        return await self._write(found, record), record

    def _observe(self, found: dict | None, now: float) -> LeaseRecord | None:
        if found is None:
            return None
        record = LeaseRecord.of(found)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return record

    async def _write(self, found: dict | None, record: LeaseRecord) -> dict | None:
        if found is None:
            body = {"apiVersion": LEASE_API, "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": record.spec()}
            return await self.client.create(body, LEASE_PLURAL, gated=False)
        body = {"apiVersion": LEASE_API, "kind": "Lease", "metadata": found["metadata"], "spec": record.spec()}
        return await self.client.replace(body, LEASE_PLURAL, gated=False)

    async def release(self) -> bool:
        """On a clean stop: give the Lease up so a standby takes over at its next try, not 15 s later."""
        if not self.leading.is_set() or not self.may_write() or self._lease is None or self._observed is None:
            return False
        self.leading.clear()
        self._renewed_at = None  # nothing more is written as leader, whatever the outcome
        try:
            await asyncio.wait_for(self._write(self._lease, lease.released(self._observed, micro_time())),
                                   self.timing.retry_period)
        except (TimeoutError, ApiError, OSError) as err:
            log.warning("could not release Lease %s/%s (a standby takes over when it expires): %s",
                        self.namespace, self.name, err)
            return False
        log.info("released Lease %s/%s", self.namespace, self.name)
        return True
