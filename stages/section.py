"""Base class for every config section: unknown keys are errors, values are validated."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section. `extra="forbid"` turns a misspelled key into an error; the
    engine's loader rewrites that error to name the file, line and closest valid key."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
