"""The shipped dataset and tool catalogue (data only; `toolgrpo.generator` builds the rows)."""

from pathlib import Path

# The folder itself, in a checkout and in an installed package alike.
DATA_DIR = Path(__file__).resolve().parent
# Reviewers' label decisions (`toolgrpo mine apply-review`), applied on the next run when present.
LABEL_OVERRIDES = DATA_DIR / "label_overrides.jsonl"
# The rows a queue of the shipped data was mined from: the training audit and the held-out rows.
SHIPPED_SAMPLES = sorted([*DATA_DIR.glob("train/*.jsonl"), *DATA_DIR.glob("eval/*.jsonl")])
