"""The one exception type of ``datamodules``."""


class DataError(ValueError):
    """A corpus, task or tokenizer file problem; the message is one line naming the file, line or key."""
