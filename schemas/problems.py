"""A problem the data gate found: where (file:line, row id), which check, what is wrong."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Problem(BaseModel):
    """One reason a file or row fails the data gate, located so a person can fix it."""

    model_config = ConfigDict(frozen=True)
    file: str
    line: int | None  # None: the whole file
    check: str
    message: str
    id: str | None = None

    @property
    def location(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.location}: {self.message} [check: {self.check}]"
