"""The user's mistakes that `pretrain generate` reports as one `error:` line (exit code 2):
a prompt that does not fit, settings that contradict each other, a model the command
cannot generate with. Everything else is a bug or a damaged file and raises as usual."""


class GenerateInputError(ValueError):
    """A prompt or a setting the model cannot take; the message says what to change."""
