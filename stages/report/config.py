from pydantic import Field

from stages.section import Section


class ReportConfig(Section):
    curve_points: int = Field(10, ge=2, description="points of the pretraining curve in report.md")
