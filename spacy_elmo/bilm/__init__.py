"""The ELMo biLM in plain PyTorch: characters -> token layer -> LSTM layers.

Nothing here imports spaCy or Thinc.
"""
from .chars import tokens_to_char_ids, token_to_char_ids
from .model import ElmoBiLM
from .errors import OptionsError, WeightsError
from .config import BiLMConfig, validate_options
from .scalar_mix import ScalarMix

__all__ = [
    "BiLMConfig",
    "ElmoBiLM",
    "ScalarMix",
    "OptionsError",
    "WeightsError",
    "tokens_to_char_ids",
    "token_to_char_ids",
    "validate_options",
]
