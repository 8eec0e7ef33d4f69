"""How text is cut into biLM sentences: one rule for pretraining and for the pipeline.

Segments are a Doc's sentences when it has sentence boundaries, else the sentences
spaCy's ``Sentencizer`` rule finds (the Doc is not changed). Whitespace-only tokens
are left out (the biLM never sees them; their rows in ``doc._.elmo`` stay zero).
The pipeline also cuts a segment longer than ``max_length`` tokens into pieces, so
memory stays bounded for any Doc. Pretraining (``pretrain.text``) reads its
sentences through ``doc_sentences``, so the model is trained as it is used.
"""
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
from spacy.pipeline import Sentencizer
from spacy.tokens import Doc

_SENTENCIZER = Sentencizer()


def sentence_starts(doc: Doc) -> List[bool]:
    """Per token, whether it starts a sentence: the Doc's own boundaries if set,
    else the ``Sentencizer`` rule's."""
    if doc.has_annotation("SENT_START"):
        return [bool(tok.is_sent_start) for tok in doc]
    return list(_SENTENCIZER.predict([doc])[0])


def _sentence_indices(doc: Doc) -> Iterator[List[int]]:
    current: List[int] = []
    for tok, start in zip(doc, sentence_starts(doc)):
        if start and current:
            yield current
            current = []
        if tok.text.strip():
            current.append(tok.i)
    if current:
        yield current


def doc_sentences(doc: Doc) -> Iterator[List[str]]:
    """The biLM sentences of ``doc`` as token strings (whitespace tokens left out)."""
    for indices in _sentence_indices(doc):
        yield [doc[i].text for i in indices]


def doc_segments(doc: Doc, max_length: Optional[int]) -> List[np.ndarray]:
    """Token indices of each biLM sentence of ``doc``, sentences longer than
    ``max_length`` tokens cut into pieces (None: never cut)."""
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    pieces: List[np.ndarray] = []
    for indices in _sentence_indices(doc):
        seg = np.asarray(indices, dtype=np.int64)
        step = len(seg) if max_length is None else max_length
        pieces.extend(seg[i : i + step] for i in range(0, len(seg), step))
    return pieces


def batch_segments(docs: Sequence[Doc], max_length: int) -> Tuple[List[str], List[int], List[np.ndarray]]:
    """Flat token strings and segment lengths of a batch, plus each doc's token
    indices in that flat order."""
    words: List[str] = []
    lengths: List[int] = []
    rows: List[np.ndarray] = []
    for doc in docs:
        segs = doc_segments(doc, max_length)
        for seg in segs:
            words.extend(doc[int(i)].text for i in seg)
            lengths.append(len(seg))
        rows.append(np.concatenate(segs) if segs else np.zeros((0,), dtype=np.int64))
    return words, lengths, rows
