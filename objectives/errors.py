"""Errors raised by `objectives` for bad settings or incompatible pairs."""


class ObjectiveError(ValueError):
    """Bad objective settings (one line naming the key), e.g. `objective.noise_density=0.7 must be in (0, 0.5]`."""
