"""Confident learning (cleanlab): label issues ranked, overlapping tool pairs, label quality.

All three read the per-tool probabilities of a predictions frame.
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
from cleanlab.dataset import find_overlapping_classes
from cleanlab.filter import find_label_issues
from cleanlab.rank import get_label_quality_scores
from pydantic import BaseModel

from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.predictions import probability_columns


def _labels_and_probabilities(
    frame: pl.DataFrame, catalogue: Catalogue
) -> tuple[np.ndarray, np.ndarray]:
    labels = np.array([catalogue.names.index(t) for t in frame["label_tool"]], dtype=int)
    return labels, frame.select(probability_columns(catalogue)).to_numpy()


def ranked_label_issues(frame: pl.DataFrame, catalogue: Catalogue) -> list[str]:
    """Ids cleanlab's `find_label_issues` flags, most likely mislabelled first."""
    labels, probabilities = _labels_and_probabilities(frame, catalogue)
    if len(set(labels.tolist())) < 2:  # cleanlab needs two classes to estimate noise
        return []
    with warnings.catch_warnings():  # every small eval slice has "too few examples" of a tool
        warnings.filterwarnings("ignore", message="May not flag all label issues")
        order = find_label_issues(
            labels, probabilities, return_indices_ranked_by="self_confidence", n_jobs=1
        )
    return [frame["id"][int(i)] for i in order]


class OverlappingPair(BaseModel):
    """Two tools the model's probabilities confuse (cleanlab `find_overlapping_classes`)."""

    tool_a: str
    tool_b: str
    n_overlapping: int
    joint_probability: float


def overlapping_tool_pairs(
    frame: pl.DataFrame, catalogue: Catalogue, top: int = 10
) -> list[OverlappingPair]:
    """The tool pairs with overlapping examples, most overlapping first."""
    labels, probabilities = _labels_and_probabilities(frame, catalogue)
    if len(set(labels.tolist())) < 2:
        return []
    table = find_overlapping_classes(labels, probabilities, class_names=catalogue.names)
    pairs = [
        OverlappingPair(
            tool_a=row["Class Name A"],
            tool_b=row["Class Name B"],
            n_overlapping=int(row["Num Overlapping Examples"]),
            joint_probability=round(float(row["Joint Probability"]), 6),
        )
        for row in table.to_dict("records")
        if row["Num Overlapping Examples"] > 0
    ]
    return pairs[:top]


def label_quality(frame: pl.DataFrame, catalogue: Catalogue) -> np.ndarray:
    """Per row: cleanlab's label quality score (self-confidence), low for a doubtful label."""
    return get_label_quality_scores(*_labels_and_probabilities(frame, catalogue))
