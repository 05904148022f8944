"""The one error type of cluster commands: a message for the user, and an exit code."""


class ClusterError(RuntimeError):
    """What went wrong, where, and what to do; the CLI prints it and exits non-zero."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
