"""Leader election's decisions, with client-go's semantics: pure functions of a Lease record and clocks.

A replica may take the Lease when nobody holds it, when it holds it already (a renewal), or when
the holder has not changed the record for a whole lease duration *as this replica observed it*
(its own monotonic clock: clocks of different machines are never compared). A leader may write
only while its last successful renewal, timed from when that renewal was sent, is younger than
the renew deadline. The deadline is shorter than the lease duration, so a leader that cannot
renew stops writing before any other replica may take over.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

LEASE_API = "coordination.k8s.io/v1"
LEASE_PLURAL = "leases"
# A standby tries again after retry_period less up to this share of it, so standbys spread out.
RETRY_JITTER = 0.2


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's defaults: lease 15 s, renew deadline 10 s, retry every 2 s."""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problem(self) -> str | None:
        """Why these durations cannot keep two leaders apart, or None."""
        if self.retry_period <= 0:
            return "--leader-elect-retry-period must be positive"
        if not self.lease_duration > self.renew_deadline:
            return "--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline"
        if not self.renew_deadline > self.retry_period * (1 + RETRY_JITTER):
            return (f"--leader-elect-renew-deadline must be longer than {1 + RETRY_JITTER:g} x "
                    "--leader-elect-retry-period")
        return None


@dataclass(frozen=True)
class LeaseRecord:
    holder: str = ""
    duration_seconds: int = 15
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "", duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def spec(self) -> dict:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.duration_seconds,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time,
                "leaseTransitions": self.transitions}


def held_by_another(record: LeaseRecord, me: str, observed_at: float, now: float) -> bool:
    """Another replica holds the Lease and, by our clock, has renewed it within its duration."""
    return bool(record.holder) and record.holder != me and observed_at + record.duration_seconds > now


def claim(current: LeaseRecord | None, me: str, observed_at: float, now: float, timing: LeaseTiming,
          timestamp: str) -> LeaseRecord | None:
    """The record to write to hold the Lease from now on, or None while another holder's is valid.

    `observed_at` is when (our monotonic clock) the current record was first seen as it is now;
    `timestamp` is now as a MicroTime for the record itself (read by people, never compared).
    """
    duration = max(1, round(timing.lease_duration))
    if current is None:
        return LeaseRecord(me, duration, timestamp, timestamp, 0)
    if held_by_another(current, me, observed_at, now):
        return None
    if current.holder == me:
        return replace(current, duration_seconds=duration, renew_time=timestamp)
    return LeaseRecord(me, duration, timestamp, timestamp, current.transitions + 1)


def released(current: LeaseRecord, timestamp: str) -> LeaseRecord:
    """What a leader writes when it stops: no holder, so a standby may take over at its next try."""
    return LeaseRecord("", 1, timestamp, timestamp, current.transitions)


def may_write(renewed_at: float | None, now: float, timing: LeaseTiming) -> bool:
    """A leader writes only within the renew deadline of its last successful renewal (when it was sent)."""
    return renewed_at is not None and now < renewed_at + timing.renew_deadline
