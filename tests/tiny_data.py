"""Small generated stand-ins for the shared corpora, for running the tests from a clone
without the shared data folder: English-like text for pretraining (made-up words in a
fixed grammar, with number agreement a language model can learn), NER sentences in
IOB2 and five-class sentiment items. Deterministic for a given seed."""
import random
from typing import List, Sequence, Tuple

_ONSETS = ["b", "br", "d", "f", "g", "gr", "k", "l", "m", "n", "p", "pl", "r", "s", "st", "t", "tr", "v", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
_CODAS = ["", "", "n", "r", "l", "m", "sk", "nt"]


def _words(rng: random.Random, n: int, syllables: Sequence[int]) -> List[str]:
    out: List[str] = []
    seen = set()
    while len(out) < n:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice(syllables)))
        word += rng.choice(_CODAS)
        if word not in seen:
            seen.add(word)
            out.append(word)
    return out


def _zipf(rng: random.Random, items: Sequence[str]) -> str:
    """An item drawn with probability falling with its rank, half the time, or any item
    (frequent words and a long tail of rare ones, as in text)."""
    if rng.random() < 0.5:
        return rng.choice(items)
    return items[min(int(rng.paretovariate(0.7)) - 1, len(items) - 1)]


def english_lines(n_lines: int, seed: int = 0) -> List[str]:
    """``n_lines`` lines of two or three sentences each: "the big nouns verb a noun ."
    with the verb agreeing with its subject (singular ``-s``), so the context predicts
    word forms, and a vocabulary of a few thousand types (the word lists are the same
    for every seed; the seed picks the sentences)."""
    lex = random.Random(20240501)
    nouns, verbs = _words(lex, 1500, (2, 3)), _words(lex, 400, (1, 2))
    adjectives, names = _words(lex, 300, (2,)), [w.capitalize() for w in _words(lex, 200, (2, 3))]
    rng = random.Random(seed)

    def noun_phrase(plural: bool) -> List[str]:
        words = [rng.choice(["the", "a", "this", "every"] if not plural else ["the", "some", "these", "many"])]
        if rng.random() < 0.5:
            words.append(_zipf(rng, adjectives))
        return words + [_zipf(rng, nouns) + ("s" if plural else "")]

    def clause() -> List[str]:
        plural = rng.random() < 0.4
        subject = [_zipf(rng, names)] if not plural and rng.random() < 0.3 else noun_phrase(plural)
        verb = _zipf(rng, verbs) + ("" if plural else "s")
        words = subject + [verb] + noun_phrase(rng.random() < 0.4)
        if rng.random() < 0.5:
            words += [rng.choice(["in", "on", "with", "near"])] + noun_phrase(rng.random() < 0.4)
        return words

    def sentence() -> List[str]:
        words = clause()
        if rng.random() < 0.3:
            words += [",", rng.choice(["and", "but"])] + clause()
        words[0] = words[0][0].upper() + words[0][1:]
        return words + ["."]

    return [" ".join(w for _ in range(rng.choice((2, 3))) for w in sentence()) for _ in range(n_lines)]


_PEOPLE = ["Alice Smith", "Bruno", "Chen Wei", "Dana Okafor", "Emil", "Farah Haddad", "Gustav Lind", "Hiroshi"]
_PLACES = ["Paris", "Lagos", "New York", "Oslo", "Lima", "Kyoto", "Cape Town", "Berlin"]
_ORGS = ["Acme Corp", "the United Nations", "Globex", "Reuters", "Initech Bank", "FIFA"]
_NER_TEMPLATES = [
    "{PER} flew to {LOC} on Monday .",
    "{ORG} opened an office in {LOC} .",
    "{PER} works for {ORG} .",
    "Shares of {ORG} fell 3 percent .",
    "In {LOC} , {PER} met the press .",
    "The report by {ORG} was welcomed in {LOC} .",
    "Officials said the rain would stop soon .",
]


def ner_sentences(n: int, seed: int = 0) -> List[Tuple[List[str], List[str]]]:
    """``n`` (words, IOB2 tags) sentences with PER, LOC and ORG entities, two clauses each
    (about as long as CoNLL-2003 sentences)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words: List[str] = []
        tags: List[str] = []
        first, second = _NER_TEMPLATES[i % len(_NER_TEMPLATES)], rng.choice(_NER_TEMPLATES)
        for part in f"{first[:-2]} ; {second[0].lower()}{second[1:]}".split():
            label = part[1:4] if part.startswith("{") else None
            if label is None:
                words.append(part)
                tags.append("O")
                continue
            name = rng.choice({"PER": _PEOPLE, "LOC": _PLACES, "ORG": _ORGS}[label]).split()
            if label == "ORG" and name[0] == "the":
                words.append(name.pop(0))
                tags.append("O")
            words += name
            tags += [f"B-{label}"] + [f"I-{label}"] * (len(name) - 1)
        out.append((words, tags))
    return out


_SENTIMENT = {
    "0": ["a dreadful , boring mess", "the worst film of the year", "painfully dull and stupid"],
    "1": ["a weak and clumsy story", "flat , forgettable acting", "it drags on far too long"],
    "2": ["an ordinary film with some moments", "neither good nor bad", "a routine , average thriller"],
    "3": ["a charming and clever comedy", "solid acting and a good script", "an enjoyable ride"],
    "4": ["a brilliant , moving masterpiece", "the best film of the year", "wonderful , warm and funny"],
}


def sst_items(n: int, seed: int = 0) -> List[Tuple[List[str], str]]:
    """``n`` (words, label) sentiment items, labels "0" (very negative) to "4"."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = str(i % 5)
        phrase = rng.choice(_SENTIMENT[label]).split()
        out.append((rng.choice([["This", "is"], ["Overall", ","], []]) + phrase + ["."], label))
    return out
