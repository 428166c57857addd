"""Error mining: categories with evidence, confident learning, the review queue (no Prefect)."""
