"""The built-in ablation: GRPO vs NGRPO scopes from three warm starts, over seeds (no Prefect)."""
