"""Base class for every config section: unknown keys are errors, values are validated."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section. `extra="forbid"` turns a misspelled key into an error; the
    engine's loader rewrites that error to name the file, line and closest valid key."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def flatten(config, prefix: str = "") -> dict:
    """A nested config as dotted keys: {'pretrain.lr': 0.001, 'finetune.tasks': ['sst2']}
    (lists stay values): how `-o`, sweeps and config diffs name a key."""
    if not isinstance(config, dict):
        return {prefix: config}
    flat: dict = {}
    for key, value in config.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat
