"""The ELMo biLM in plain PyTorch: characters -> token layer -> LSTM layers.

Nothing here imports spaCy or Thinc.
"""
from .chars import tokens_to_char_ids, token_to_char_ids
from .model import ElmoBiLM
from .options import OptionsError, validate_options
from .allennlp import WeightsError
from .scalar_mix import ScalarMix

__all__ = [
    "ElmoBiLM",
    "ScalarMix",
    "OptionsError",
    "WeightsError",
    "tokens_to_char_ids",
    "token_to_char_ids",
    "validate_options",
]
