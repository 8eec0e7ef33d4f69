"""Errors raised for bad model files: both are ValueErrors whose message names the
file and the field or tensor at fault."""


class OptionsError(ValueError):
    """A model's hyper-parameters (options.json, config.json) are missing or invalid."""


class WeightsError(ValueError):
    """A weights file is missing, unreadable, or does not match its options."""
