"""The experiment config: YAML -> validated pydantic objects, with errors for people.

An unknown or misspelled key, a bad value or an unset environment variable raises
ConfigError naming the file, the line, the dotted key and, for unknown keys, the closest
valid key. `-o section.key=value` overrides are applied before validation.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from pipeline.interpolate import MissingVariable, interpolate
from pipeline.yaml_lines import load_yaml_with_lines
from stages.dataset.config import DatasetConfig
from stages.evaluate.config import EvaluateConfig
from stages.finetune.config import FinetuneConfig
from stages.ingest.config import IngestConfig
from stages.pretrain.config import PretrainConfig
from stages.report.config import ReportConfig
from stages.section import Section
from stages.tokenizer.config import TokenizerConfig


class ConfigError(ValueError):
    """A mistake in the user's config; the message says where and what to do."""


class RayConfig(Section):
    address: str | None = Field(
        None, description="Ray cluster to join: 'auto' = the cluster `ray start --head` started "
        "on this machine (or RAY_ADDRESS), or an address ('10.0.0.5:6379', 'ray://head:10001'); "
        "unset = a new embedded local Ray for this run, even when other clusters run here")
    num_cpus: int | None = Field(
        None, ge=1, description="CPUs for the embedded local Ray (default: all cores)")


class WandbConfig(Section):
    mode: Literal["disabled", "offline", "online"] = Field(
        "disabled", description="wandb mode; offline writes runs under the stage directory")
    project: str = Field("pretrain-pipeline", description="wandb project name")
    entity: str | None = Field(None, description="wandb entity (team); unset = your default")


class TrackingConfig(Section):
    wandb: WandbConfig = Field(default_factory=WandbConfig)


class ExperimentConfig(Section):
    """One experiment: where it writes, what it reads, and one section per stage."""

    name: str = Field(description="experiment name; used for the default workdir and in reports")
    workdir: str | None = Field(None, description="where stage outputs live (default runs/<name>)")
    data_dir: str = Field("${DATA_DIR:-../shared/data}",
                          description="root for relative data paths (GLUE, corpus)")
    seed: int = Field(0, description="seed for every stage that samples, shuffles or initialises")
    ray: RayConfig = Field(default_factory=RayConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    ingest: IngestConfig
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @field_validator("name")
    @classmethod
    def _name_is_a_path_component(cls, value: str) -> str:
        if not value or "/" in value or value.startswith("."):
            raise ValueError("must be a plain name (no '/', not starting with '.'), e.g. 'gpt-tiny'")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir_is_a_filesystem_path(cls, value: str | None) -> str | None:
        # Taken as a path, "s3://bucket/x" would quietly become the local folder ./s3:/bucket/x.
        if value is not None and "://" in value:
            raise ValueError(
                "object-store workdirs (s3://, gs://, ...) are not supported yet: stage outputs "
                "are written with local file operations. Use a filesystem path; on a cluster, one "
                "that every node mounts (NFS, EFS, a mounted bucket), e.g. /mnt/shared/runs/NAME")
        return value

    @property
    def resolved_workdir(self) -> Path:
        return Path(self.workdir or Path("runs") / self.name).resolve()

    @property
    def resolved_data_dir(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read, override, interpolate and validate one experiment YAML."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist (try one of configs/*.yaml)")
    try:
        raw, lines = load_yaml_with_lines(path)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections (name:, ingest:, ...)")
    for override in overrides:
        key_path = _apply_override(raw, override)
        # Errors in overridden keys point at the flag, not at a line of the file.
        lines = {k: v for k, v in lines.items() if k[:len(key_path)] != key_path}
        lines[key_path] = f"-o {override}"
    try:
        data = interpolate(raw)
    except MissingVariable as e:
        raise ConfigError(
            f"{_where(path, lines, e.key_path)}: environment variable ${{{e.variable}}} in "
            f"'{_dotted(e.key_path)}' is not set; export it or write ${{{e.variable}:-default}}"
        ) from None
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain(e, path, lines)) from None


def _apply_override(raw: dict, override: str) -> tuple:
    key, sep, value_text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{override}' must look like section.key=value")
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override '{override}': '{part}' is not a section")
        node = child
    node[parts[-1]] = yaml.safe_load(value_text) if value_text.strip() else None
    return tuple(parts)


def _explain(error: ValidationError, path: Path, lines: dict) -> str:
    messages = []
    for item in error.errors():
        loc = tuple(item["loc"])
        where = _where(path, lines, loc)
        key = _dotted(loc)
        if item["type"] == "extra_forbidden":
            valid = _valid_keys_at(ExperimentConfig, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            hint = f"did you mean '{_dotted(loc[:-1] + (close[0],))}'?" if close else (
                f"valid keys here: {', '.join(sorted(valid))}")
            messages.append(f"{where}: unknown key '{key}'; {hint}")
        elif item["type"] == "missing":
            messages.append(f"{where}: required key '{key}' is missing")
        else:
            messages.append(f"{where}: '{key}': {item['msg']} (got {item.get('input')!r})")
    return "\n".join(messages)


def _valid_keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the nested model that `loc` points into."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if isinstance(current, type) else None
        if field is None:
            return []
        current = _model_of(field.annotation)
    return list(current.model_fields) if isinstance(current, type) else []


def _model_of(annotation: Any) -> Any:
    """The BaseModel inside an annotation like `Foo`, `list[Foo]` or `Foo | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _where(path: Path, lines: dict, loc: tuple) -> str:
    for end in range(len(loc), 0, -1):
        found = lines.get(loc[:end])
        if isinstance(found, str):
            return found  # came from an override flag
        if found is not None:
            return f"{path}:{found}"
    return str(path)


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
