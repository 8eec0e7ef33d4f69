"""Characters: token strings to ELMo character ids.

Each token becomes ``max_chars`` (50) ids: begin-of-word, its UTF-8 bytes (cut
to ``max_chars - 2`` bytes, which may split a multi-byte character), end-of-word,
then in-word padding. Every id is shifted by +1 so that 0 can mark a padded
token. The sentence-boundary tokens ``<S>`` and ``</S>`` get their own ids.
"""
from functools import lru_cache
from typing import Sequence

import numpy as np

BOS_CHAR = 256
EOS_CHAR = 257
BOW_CHAR = 258
EOW_CHAR = 259
PAD_CHAR = 260
N_CHARACTERS = 262  # 261 raw ids + the all-zero padding row
MAX_CHARS = 50
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _boundary_ids(char: int, max_chars: int) -> np.ndarray:
    raw = [BOW_CHAR, char, EOW_CHAR] + [PAD_CHAR] * (max_chars - 3)
    return np.asarray(raw, dtype=np.int64) + 1


@lru_cache(maxsize=65536)
def _token_ids(token: str, max_chars: int) -> bytes:
    if token == BOS_TOKEN:
        return _boundary_ids(BOS_CHAR, max_chars).tobytes()
    if token == EOS_TOKEN:
        return _boundary_ids(EOS_CHAR, max_chars).tobytes()
    data = token.encode("utf-8", "ignore")[: max_chars - 2]
    ids = np.full(max_chars, PAD_CHAR + 1, dtype=np.int64)
    ids[0] = BOW_CHAR + 1
    ids[1 : 1 + len(data)] = np.frombuffer(data, dtype=np.uint8).astype(np.int64) + 1
    ids[1 + len(data)] = EOW_CHAR + 1
    return ids.tobytes()


def token_to_char_ids(token: str, max_chars: int = MAX_CHARS) -> np.ndarray:
    """The ``max_chars`` character ids (already +1) of one token string."""
    if max_chars < 4:
        raise ValueError(f"max_characters_per_token must be at least 4, got {max_chars}")
    return np.frombuffer(_token_ids(token, max_chars), dtype=np.int64).copy()


def tokens_to_char_ids(tokens: Sequence[str], max_chars: int = MAX_CHARS) -> np.ndarray:
    """Character ids of a token sequence, shape ``(len(tokens), max_chars)``, int64.

    Boundary tokens are *not* added here: the biLM adds ``<S>``/``</S>`` itself.
    """
    if max_chars < 4:
        raise ValueError(f"max_characters_per_token must be at least 4, got {max_chars}")
    if len(tokens) == 0:
        return np.zeros((0, max_chars), dtype=np.int64)
    buf = b"".join(_token_ids(tok, max_chars) for tok in tokens)
    return np.frombuffer(buf, dtype=np.int64).reshape(len(tokens), max_chars).copy()


def bos_char_ids(max_chars: int = MAX_CHARS) -> np.ndarray:
    return _boundary_ids(BOS_CHAR, max_chars)


def eos_char_ids(max_chars: int = MAX_CHARS) -> np.ndarray:
    return _boundary_ids(EOS_CHAR, max_chars)
