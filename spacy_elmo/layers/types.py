"""Model type aliases used across the Thinc glue."""
from typing import List

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats2d, Floats3d

# Docs to all biLM layers per doc: (n_layers, len(doc), width).
ElmoModelT = Model[List[Doc], List[Floats3d]]
# All layers per doc to one vector per token.
MixModelT = Model[List[Floats3d], List[Floats2d]]
# Docs to one vector per token (what spaCy's task models take as ``tok2vec``).
Tok2VecT = Model[List[Doc], List[Floats2d]]
