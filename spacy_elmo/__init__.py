"""spaCy v3 plugin for ELMo (Peters et al. 2018).

Data flow: text -> sentences (``segmentation``) -> characters (``bilm.chars``) ->
token layer (``bilm.token_encoder``) -> LSTM (``bilm.lstm``), both in ``bilm.model`` ->
Doc (``pipe``, through ``layers.elmo_model``) -> listener mix (``layers.listener``) -> task.
"""
from .bilm import ElmoBiLM, OptionsError, ScalarMix, WeightsError

__version__ = "0.1.0"

__all__ = ["ElmoBiLM", "ScalarMix", "OptionsError", "WeightsError", "restore_elmo_hooks", "set_elmo_hooks", "__version__"]

from . import layers, loaders, pipe  # noqa: E402,F401  (registers the factory, architectures, loaders)
from .hooks import restore_elmo_hooks, set_elmo_hooks  # noqa: E402
