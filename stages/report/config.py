from pydantic import Field

from stages.section import Section


class ReportConfig(Section):
    formats: list[str] = Field(default_factory=lambda: ["md", "json"])
