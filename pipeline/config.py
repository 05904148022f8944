"""The experiment config: YAML -> validated pydantic objects, with errors for people.

An unknown or misspelled key, a bad value or an unset environment variable raises
ConfigError naming the file, the line, the dotted key and, for unknown keys, the closest
valid key. `-o section.key=value` overrides are applied before validation.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.interpolate import MissingVariable, interpolate
from pipeline.sweep_config import SweepConfig
from stages.dataset.config import DatasetConfig
from stages.evaluate.config import EvaluateConfig
from stages.finetune.config import FinetuneConfig
from stages.ingest.config import IngestConfig
from stages.pretrain.config import PretrainConfig
from stages.report.config import ReportConfig
from stages.section import Section
from stages.tokenizer.config import TokenizerConfig
from stages.validation_errors import dotted_key, explain_validation_error, where_in_file
from stages.yaml_lines import load_yaml_with_lines, parse_yaml
from storage.errors import ConfigError
from storage.urls import check_location, is_url






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
    group: str | None = Field(
        None, description="wandb group of every run of this experiment (a sweep sets its name, so "
        "its points group together); unset = the experiment name. Run names keep the experiment name")
    tags: list[str] = Field(
        default_factory=list, description="extra wandb tags on every run, after the stage, task "
        "and fingerprint tags")


class TrackingConfig(Section):
    wandb: WandbConfig = Field(default_factory=WandbConfig)


class ExperimentConfig(Section):
    """One experiment: where it writes, what it reads, and one section per stage."""

    name: str = Field(description="experiment name; used for the default workdir and in reports")
    workdir: str | None = Field(None, description="the run's folder: its index (pipeline.json), resolved "
                                "config and, unless `store` says otherwise, its stage outputs (default runs/<name>); "
                                "a path, or an object-store URL such as s3://bucket/prefix (credentials and "
                                "AWS_ENDPOINT_URL from the environment or ~/.aws)")
    store: str | None = Field(
        None, description="where stage outputs live, as <store>/<stage>/<fingerprint>/ (default: the workdir); "
        "runs that name one store share every stage whose fingerprint they have in common, as a "
        "sweep's points do (<sweep root>/store); a path or an object-store URL (s3://bucket/prefix)")
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
    sweep: SweepConfig | None = Field(
        None, description="a grid or list of overrides that `pretrain sweep` runs, one experiment per point "
        "(see the sweep.* keys); `pretrain run` refuses a config that has one")

    @field_validator("name")
    @classmethod
    def _name_is_a_path_component(cls, value: str) -> str:
        if not value or "/" in value or value.startswith("."):
            raise ValueError("must be a plain name (no '/', not starting with '.'), e.g. 'gpt-tiny'")
        return value

    @model_validator(mode="after")
    def _finetune_tasks_fit_the_model(self) -> "ExperimentConfig":
        self.finetune.check_model_family(self.pretrain.model.family)  # BERT cannot generate: refused up front
        return self

    @field_validator("workdir", "store")
    @classmethod
    def _workdir_is_a_path_or_a_url(cls, value: str | None) -> str | None:
        return None if value is None else check_location(value)

    @property
    def workdir_url(self) -> str | None:
        """The workdir's object-store URL (s3://bucket/prefix), or None for a path."""
        return self.workdir if is_url(self.workdir) else None

    @property
    def store_url(self) -> str | None:
        """The stage store's object-store URL, or None when it is a path."""
        if self.store:
            return self.store if is_url(self.store) else None
        return self.workdir_url

    @property
    def resolved_workdir(self) -> Path:
        """The workdir as a local folder; for an object-store workdir, this machine's
        mirror of it (storage.mirror.mirror_dir)."""
        if self.workdir_url:
            from storage.mirror import mirror_dir

            return mirror_dir(self.workdir_url)
        return Path(self.workdir or Path("runs") / self.name).resolve()

    @property
    def resolved_store(self) -> Path:
        """The stage store as a local folder (the mirror, for an object store)."""
        if self.store_url:
            from storage.mirror import mirror_dir

            return mirror_dir(self.store_url)
        return Path(self.store).resolve() if self.store else self.resolved_workdir

    @property
    def store_location(self) -> str | Path:
        """What `open_store` takes: the store's URL, or its path."""
        return self.store_url or self.resolved_store

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
    except ValueError as e:  # YamlInputError: not UTF-8, not YAML, or hostile YAML
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
            f"{where_in_file(path, lines, e.key_path)}: environment variable ${{{e.variable}}} in "
            f"'{dotted_key(e.key_path)}' is not set; export it or write ${{{e.variable}:-default}}"
        ) from None
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(explain_validation_error(e, path, lines, ExperimentConfig)) from None


def parse_override(override: str) -> tuple[tuple[str, ...], Any]:
    """`section.key=value` -> (("section", "key"), the value read as YAML; None when empty).

    The value goes through the same hardened YAML reader as config files; a malformed
    one raises ConfigError naming the flag. Shared by `run`, `plan` and `sweep`.
    """
    key, sep, value_text = override.partition("=")
    parts = tuple(part.strip() for part in key.split("."))
    flag = _flag(override)
    if not sep or not all(parts):
        raise ConfigError(f"{flag}: an override must look like section.key=value, "
                          f"e.g. -o pretrain.max_steps=2000")
    if not value_text.strip():
        return parts, None
    try:
        value, _ = parse_yaml(value_text, flag, with_lines=False)
    except ValueError as e:  # YamlInputError, naming the flag
        raise ConfigError(f"{e}; the value is read as YAML: quote text that starts with [ {{ : & * ! "
                          f"or contains ': ' (-o '{key.strip()}=\"...\"')") from None
    return parts, value


def _apply_override(raw: dict, override: str) -> tuple:
    parts, value = parse_override(override)
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{_flag(override)}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value
    return parts


def _flag(override: str) -> str:
    # Quoted where a shell needs it: "-o 'pretrain.lr=: x'" reads unambiguously.
    return f"-o {shlex.quote(override)}"


