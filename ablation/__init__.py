"""The built-in ablation: GRPO vs NGRPO scopes from two warm starts, over seeds (no Prefect)."""
