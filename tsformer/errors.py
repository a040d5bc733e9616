"""Domain errors. The CLI turns each into one `Error: ...` line and exit code 2."""


class TsformerError(Exception):
    """Base class: a problem the user can fix; the message says what and how."""


class DataError(TsformerError):
    """The CSV (or its contents) cannot be used as given."""


class ConfigError(TsformerError):
    """A config file, flag or override is unknown or out of range."""


class CheckpointError(TsformerError):
    """A checkpoint or run folder is missing, corrupt, foreign or of another format."""


class LeakageError(TsformerError):
    """A leakage check failed: the model or the pipeline could see the future."""


class TrainingError(TsformerError):
    """Training cannot go on (for example the loss became NaN)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop) during training, raised where Ctrl-C raises KeyboardInterrupt so both end a
    run cleanly; only the exit code tells them apart."""


def stop_code(stop: KeyboardInterrupt) -> int:
    """The shell's exit code for a run stopped by `stop`: 128 + the signal's number (SIGINT 2, SIGTERM 15)."""
    return 143 if isinstance(stop, Terminated) else 130


class Interrupted(TsformerError):
    """The user or a scheduler stopped a run (Ctrl-C, SIGTERM); what was saved and how to resume is in the
    message."""

    def __init__(self, message: str, stop: KeyboardInterrupt | None = None):
        super().__init__(message)  # args (message,), so it copies and pickles (exit_code with its state)
        self.exit_code = stop_code(stop or KeyboardInterrupt())
