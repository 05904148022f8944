"""Moved to `stages.yaml_lines` (stages use it too, and stages must not import pipeline)."""

from stages.yaml_lines import KeyPath, YamlInputError, load_yaml_with_lines, parse_yaml  # noqa: F401
