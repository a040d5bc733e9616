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


class Interrupted(TsformerError):
    """The user stopped a run (Ctrl-C); what was saved and how to resume is in the message."""

    exit_code = 130
