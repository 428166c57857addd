"""Evaluation: decode a saved model on sample rows and measure it (no Prefect here)."""
