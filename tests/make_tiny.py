"""A tiny random biLM in the AllenNLP / bilm-tf file layout, written from seeded random
weights, so that the test suite runs from a clone without the shared fixtures.

It has the shapes of the shared ``fixtures/tiny`` (char embedding 16, filters
(1,8) (2,8) (3,16) (4,32) (5,64), 2 highway layers, cell 64, projection 16, clips 3) and
weights scaled so that LSTM cell and projection clipping really happen. The golden
AllenNLP outputs exist only for the shared fixture; this model is for every other test.

    python tests/make_tiny.py OUT_DIR     # options.json, weights.hdf5, sentences.json
"""
import json
import sys
from pathlib import Path
from typing import Dict, List

import h5py
import numpy as np

SEED = 1405
# Weight scales: large enough that the clips bite, small enough that float32 rounding
# does not grow along a 40-token sentence.
SCALES = {"proj": 0.7, "lstm_w": 0.3, "forget": 1.0, "lstm_proj": 2.5}
OPTIONS: Dict = {
    "lstm": {"use_skip_connections": True, "projection_dim": 16, "cell_clip": 3, "proj_clip": 3, "dim": 64,
             "n_layers": 2},
    "char_cnn": {"activation": "relu", "filters": [[1, 8], [2, 8], [3, 16], [4, 32], [5, 64]], "n_highway": 2,
                 "embedding": {"dim": 16}, "n_characters": 262, "max_characters_per_token": 50},
}
# Short and long sentences, a one-token one, tokens over 50 characters and over 48 bytes,
# multi-byte scripts and emoji (the same kinds of input as the shared fixture's).
SENTENCES: List[List[str]] = [
    ["Hello"],
    ["The", "river", "bank", "was", "flooded", "after", "the", "storm", "."],
    ["She", "paid", "the", "cheque", "into", "her", "bank", "account", "on", "Monday", "."],
    ["Naïve", "café", "owners", "in", "Zürich", "said", "«", "Grüezi", "»", "!"],
    ["Prices", "rose", "3.5", "%", "in", "2023", ",", "and", "wages", "did", "not", "keep", "up", ";", "the",
     "bank", "said", "it", "would", "hold", "rates", "while", "inflation", "stayed", "above", "its", "target",
     "for", "a", "second", "year", "running", "according", "to", "figures", "published", "on", "Tuesday",
     "morning", "."],
    ["Visit", "https://example.org/a/very/long/path/that/goes/on/and/on/and/on/for/ever/index.html", "now", "."],
    ["Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch", "is", "a", "village", "on", "Anglesey", "."],
    ["Москва", "—", "столица", "России", "."],
    ["東京", "は", "日本", "の", "首都", "です", "。"],
    ["I", "❤️", "coding", "👩‍💻", "at", "night", "👍🏽", "🇩🇪"],
    ["é" * 30, "x" * 49, "<S>", "</S>", "", "ok"],
    ["Yes", "!"],
]


def tiny_weights(seed: int = SEED) -> Dict[str, np.ndarray]:
    """The datasets of ``weights.hdf5`` (TensorFlow layout, float32), from a seeded generator."""
    rng = np.random.default_rng(seed)
    e, p, c = OPTIONS["char_cnn"]["embedding"]["dim"], OPTIONS["lstm"]["projection_dim"], OPTIONS["lstm"]["dim"]
    filters = OPTIONS["char_cnn"]["filters"]
    f = sum(n for _, n in filters)

    def normal(scale: float, *shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {"char_embed": normal(1.0, 261, e)}
    for i, (width, n) in enumerate(filters):
        out[f"CNN/W_cnn_{i}"] = normal(1.0 / np.sqrt(width * e), 1, width, e, n)
        out[f"CNN/b_cnn_{i}"] = normal(0.1, n)
    for k in range(OPTIONS["char_cnn"]["n_highway"]):
        out[f"CNN_high_{k}/W_transform"] = normal(1.0 / np.sqrt(f), f, f)
        out[f"CNN_high_{k}/b_transform"] = normal(0.1, f)
        out[f"CNN_high_{k}/W_carry"] = normal(1.0 / np.sqrt(f), f, f)
        out[f"CNN_high_{k}/b_carry"] = normal(0.5, f) - 1.0
    out["CNN_proj/W_proj"] = normal(SCALES["proj"] / np.sqrt(f), f, p)
    out["CNN_proj/b_proj"] = normal(0.1, p)
    for d in range(2):
        for layer in range(OPTIONS["lstm"]["n_layers"]):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            out[f"{cell}/W_0"] = normal(SCALES["lstm_w"], 2 * p, 4 * c)
            bias = normal(0.5, 4 * c)
            bias[2 * c : 3 * c] += SCALES["forget"]  # the forget gate (TF order i, j, f, o): cells accumulate and clip
            out[f"{cell}/B"] = bias
            out[f"{cell}/W_P_0"] = normal(SCALES["lstm_proj"] / np.sqrt(c), c, p)
    return out


def write_tiny(out: Path, seed: int = SEED) -> Path:
    """Write ``options.json``, ``weights.hdf5`` and ``sentences.json`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "options.json").write_text(json.dumps(OPTIONS, indent=2), encoding="utf-8")
    (out / "sentences.json").write_text(json.dumps(SENTENCES, ensure_ascii=False), encoding="utf-8")
    with h5py.File(out / "weights.hdf5", "w") as h5:
        for name, value in tiny_weights(seed).items():
            h5.create_dataset(name, data=value)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/make_tiny.py OUT_DIR")
    print(write_tiny(Path(sys.argv[1])))
