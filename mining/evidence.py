"""Evidence about a request: its template (slots masked); its wording is `common.wording`.

Rows with equal templates are near-identical requests.
"""

from __future__ import annotations

import re

from toolgrpo.common.wording import mask_slot_values
from toolgrpo.schemas.catalogue import Catalogue
from toolgrpo.schemas.figures import AMOUNT
from toolgrpo.schemas.samples import PREVIOUS_STEPS_HEADER


def request_template(prompt: str, catalogue: Catalogue) -> str:
    """The prompt with slot values masked: rows with equal templates are near-identical.

    Identifiers are masked everywhere; amounts only in a request without executed steps,
    because after a `check_balance` step the request's amount is compared with the observed
    balance, and that comparison decides the label.
    """
    request, header, history = prompt.partition(PREVIOUS_STEPS_HEADER)
    request = mask_slot_values(request, catalogue)
    if not header:
        request = AMOUNT.sub("<n>", request)  # one slot whatever its form: 10万, 100k
    return re.sub(r"\s+", " ", request).strip().lower() + header + history
