"""Reports people read: markdown tables, plots, the run report and its HTML (no Prefect here)."""
