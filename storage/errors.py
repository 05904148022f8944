"""The user's mistake about where bytes live, as the config loader reports its own.

A workdir or store URL that names no store, a bucket that is not there, refused
credentials, a stage directory another run is writing: each is fixed by the user, not by
us, so each is the same error the config loader raises (exit code 2 at the CLI).
Defined here, in the bottom layer, so storage raises it without importing the engine;
pipeline.config re-exports it as the config's own error.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A mistake in the user's config or settings; the message says where and what to do."""
