"""Gang scheduling: the backend interface, the gang shape, the registry and resolver, and backends/."""
