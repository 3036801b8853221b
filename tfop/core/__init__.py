"""The pure core: one pass over one job, (job, observed, now) -> Plan. No I/O."""
