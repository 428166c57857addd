"""The data gate: read sample files, check every row against the contract (no Prefect)."""
