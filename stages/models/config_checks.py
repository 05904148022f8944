"""The rules the family configs share (gpt/config.py, bert/config.py, t5/config.py), each
written once. Torch-free: the pretrain config runs them through the family config when it
validates `pretrain.model`. Messages name the key and what to change, in words that read
the same for a YAML key and a dataclass field."""

from __future__ import annotations

from typing import Any


def check_variant(family: str, variant: str, variants: tuple[str, ...]) -> None:
    if variant not in variants:
        raise ValueError(f"variant={variant!r} is not a {family!r} variant; family {family} takes "
                         f"{' or '.join(repr(v) for v in variants)}")


def check_sizes(config: Any, names: tuple[str, ...], dropout: bool = True) -> None:
    """Each of `names` >= 1 and dropout in [0, 1)."""
    owner = type(config).__name__
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{owner}: {name} must be >= 1, got {getattr(config, name)}")
    if dropout and not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"{owner}: dropout must be in [0, 1), got {config.dropout}")


def check_heads_divide(hidden_size: int, num_heads: int) -> None:
    if hidden_size % num_heads:
        options = [h for h in range(1, hidden_size + 1) if hidden_size % h == 0][:8]
        raise ValueError(
            f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; set num_heads to a "
            f"divisor of hidden_size (e.g. one of {options}) or change hidden_size")


def refuse_outside_variant(variant: str, fits: dict[str, bool], why: str) -> None:
    """The keys whose value does not fit (False in `fits`) are read by `variant` only:
    refuse them rather than ignore them."""
    given = [name for name, ok in fits.items() if not ok]
    if given:
        raise ValueError(f"{', '.join(given)} apply to variant '{variant}' only ({why}); set variant "
                         f"'{variant}' or remove them")
