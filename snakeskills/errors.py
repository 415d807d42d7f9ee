"""One exception type for user-facing input/config problems."""


class SnakeskillsError(Exception):
    """Bad input or config: the message names the file, line or config key at fault."""
