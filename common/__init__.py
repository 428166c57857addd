"""What several layers read alike: the machine's usable CPUs and the wording of a request (no
Prefect)."""
