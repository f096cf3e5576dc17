"""SQLite persistence (WAL): the durable alert inbox and the journal of faults, plans and outcomes."""
