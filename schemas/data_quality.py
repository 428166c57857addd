"""The data gate's report (data_quality.json): every row counted valid or invalid, with reasons."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, computed_field

from toolgrpo.schemas.label_overrides import AppliedOverride
from toolgrpo.schemas.problems import Problem


class ConflictRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    location: str
    tool: str


class LabelConflict(BaseModel):
    """Rows whose prompts are identical once normalised, labelled with different tools."""

    model_config = ConfigDict(frozen=True)
    prompt: str  # normalised
    rows: list[ConflictRow]

    @property
    def tools(self) -> list[str]:
        return sorted({row.tool for row in self.rows})


class DataReport(BaseModel):
    """The data gate's verdict: every row counted valid or invalid, with the reasons."""

    files: list[str]
    rows: int
    valid_rows: int
    invalid_rows: int
    failures: list[Problem]
    conflicts: list[LabelConflict]
    overrides: list[AppliedOverride]
    warnings: list[str]
    counts: dict[str, dict[str, int]] = {}
    run_dir: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def ok(self) -> bool:
        """True when no file, row or override failed a check."""
        return not self.failures

    def rows_line(self) -> str:
        """`1683 of 1685 rows valid`, and what failed besides rows: a file that could not be read
        has no rows to count, so its report must not read as every row valid."""
        line = f"{self.valid_rows} of {self.rows} rows valid"
        whole = [problem for problem in self.failures if problem.line is None]
        if whole:
            line += f"; {len(whole)} file problem(s), first: {whole[0]}"
        return line
