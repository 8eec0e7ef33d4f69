"""``paths.init``: the model a pretraining run starts from (continued pretraining).

The init model is one of:
- a directory in the project's own format (config.json + model.safetensors [+ vocab.txt]);
- published weights: a directory with an options file and one ``.hdf5`` file, the ``.hdf5``
  file itself (its options beside it: ``options.json`` or AllenNLP's
  ``<stem>_options.json`` for ``<stem>_weights.hdf5``), or a list of the two files
  ``[options.json, weights.hdf5]``;
- the name of a published model (``spacy_elmo.published``), downloaded once into the cache.

What is kept: the biLM's shapes come from the init model (a config whose [model] is not empty
must agree with it), unless ``[training] grow = true``: then [model] may be wider (more LSTM
cells, a wider projection, more char-CNN filters) and the init model is grown into it
(``pretrain/grow.py``).
With ``[vocab] from_init = true`` (the default) and an init model that has a softmax, its
vocabulary and softmax are kept, and words of the new corpus outside that vocabulary become
``<unk>``. Otherwise (published weights carry no softmax, or ``from_init = false``) a fresh
softmax ([softmax]) is trained over the top ``[vocab] size`` words of the new corpus, on top of
the init model's character layer and LSTMs.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from ..bilm import ElmoBiLM
from ..bilm.config import option_differences, validate_options
from .grow import grow_weights, growth_problems

InitPath = Union[str, Path, Sequence[Union[str, Path]]]


@dataclass
class InitModel:
    """A loaded init model. ``vocab`` and ``softmax_options`` are None when it has no softmax."""

    source: str
    bilm: ElmoBiLM
    vocab: Optional[List[str]]
    softmax_options: Optional[Dict[str, Any]]


def read_init(init: InitPath) -> InitModel:
    """Load ``paths.init`` in any of the accepted forms (see the module docstring)."""
    from ..bilm.serialize import CONFIG_NAME, VOCAB_NAME, read_vocab

    if not isinstance(init, (str, Path)):
        files = [Path(p) for p in init]
        if len(files) != 2:
            raise ValueError(f"paths.init: a list must name two files, [options.json, weights.hdf5]; got {len(files)}")
        options, weights = sorted(files, key=lambda p: p.suffix.lower() in (".hdf5", ".h5"))
        return _allennlp(options, weights)
    path = Path(init)
    if path.is_dir() and (path / CONFIG_NAME).exists():
        bilm = ElmoBiLM.load(path)
        has_softmax = bilm.vocab_size > 0 and (path / VOCAB_NAME).exists()
        vocab = read_vocab(path) if has_softmax else None
        softmax = dict(bilm.config.softmax) if has_softmax else None
        return InitModel(str(path), bilm, vocab, softmax)
    if path.is_dir():
        hdf5 = sorted(path.glob("*.hdf5"))
        if len(hdf5) != 1:
            raise ValueError(
                f"paths.init {path}: expected a spacy-elmo model directory (config.json) or a directory "
                f"with an options file and one .hdf5 weights file (found {len(hdf5)} .hdf5 files)"
            )
        return _allennlp(_options_beside(hdf5[0]), hdf5[0])
    if path.is_file() and path.suffix.lower() in (".hdf5", ".h5"):
        return _allennlp(_options_beside(path), path)
    if not path.exists():
        from ..published import PUBLISHED, fetch_published

        if str(init) in PUBLISHED:
            options, weights = fetch_published(str(init))
            return _allennlp(options, weights)
        raise ValueError(
            f"paths.init {path}: no such file or directory, and not a published model name ({', '.join(PUBLISHED)})"
        )
    raise ValueError(f"paths.init {path}: expected a model directory, an .hdf5 weights file or a published name")


def init_is_gone(init: InitPath) -> bool:
    """Whether ``paths.init`` names files that no longer exist (and is not a published name)."""
    from ..published import PUBLISHED

    if isinstance(init, (str, Path)):
        return not Path(init).exists() and str(init) not in PUBLISHED
    return not all(Path(p).exists() for p in init)


def settle_from_checkpoint(config: Dict[str, Any], saved: Dict[str, Any], source: str, keep_softmax: bool) -> None:
    """Fill ``config`` in place from a checkpoint's config ``saved`` (the run as it was settled
    from its init model at the start) with what the init model gave it: [model], and [softmax]
    and [vocab] size when ``keep_softmax`` (the init model's softmax was kept; otherwise they
    are the config's own, and the resume compares them with the checkpoint's). A non-empty
    [model] must agree with the checkpoint's, as it had to agree with the init model."""
    if config.get("model"):
        given = validate_options(config["model"], source="pretrain config [model]")
        diff = option_differences(given, saved["model"])
        if diff:
            raise ValueError(
                f"{source}: the config's [model] differs from the checkpoint's in {', '.join(diff)}; "
                "a resumed run keeps its shapes: make [model] match, or use another --output"
            )
    config["model"] = saved["model"]
    if keep_softmax:
        config["softmax"] = dict(saved["softmax"])
        config["vocab"]["size"] = saved["vocab"]["size"]


def _options_beside(weights: Path) -> Path:
    candidates = [weights.parent / "options.json"]
    if weights.stem.endswith("_weights"):
        candidates.insert(0, weights.parent / (weights.stem[: -len("_weights")] + "_options.json"))
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise ValueError(
        f"paths.init {weights}: no options file beside it (looked for {', '.join(c.name for c in candidates)}); "
        "give both files: init = [\"options.json\", \"weights.hdf5\"]"
    )


def _allennlp(options: Path, weights: Path) -> InitModel:
    return InitModel(f"{options} + {weights}", ElmoBiLM.from_allennlp(options, weights), None, None)


def settle_config(config: Dict[str, Any], init: InitModel, log: Callable[[str], None] = print) -> bool:
    """Fill ``config`` from the init model, in place: [model] (an empty [model] is taken from
    init; a non-empty one must agree, or with ``[training] grow`` be a wider shape of it) and,
    when the softmax is kept, [softmax] and [vocab] size. Returns whether the init model's
    vocabulary and softmax are kept."""
    options = init.bilm.options
    if config.get("model"):
        given = validate_options(config["model"], source="pretrain config [model]")
        diff = option_differences(given, options)
        if diff and not config["training"].get("grow"):
            raise ValueError(
                f"paths.init {init.source}: the config's [model] differs from the init model in {', '.join(diff)}; "
                "the shapes come from the init model: make [model] match it, leave [model] empty, or set "
                "[training] grow = true to widen the init model (lstm.dim, lstm.projection_dim, char_cnn.filters)"
            )
        problems = growth_problems(options, given) if diff else []
        if problems:
            raise ValueError(f"paths.init {init.source}: [training] grow: the config's [model] cannot grow from the "
                             f"init model: {'; '.join(problems)}")
        if diff:
            log(f"Growing {init.source} to the config's [model] ({', '.join(diff)}; config vs init): "
                "it starts out computing the init model's layers")
            options = given
    config["model"] = options
    keep = bool(config["vocab"].get("from_init", True)) and init.vocab is not None
    if keep:
        config["vocab"]["size"] = len(init.vocab)
        config["softmax"] = dict(init.softmax_options or {"type": "full"})
        log(f"Continuing {init.source}: its vocabulary ({len(init.vocab):,} words) and softmax are kept; "
            "words outside it are <unk>")
    else:
        if int(config["vocab"].get("size") or 0) < 4:
            raise ValueError("pretrain config: [vocab] size (at least 4) is needed for a fresh softmax over the corpus")
        why = "it has no softmax" if init.vocab is None else "vocab.from_init = false"
        log(f"Starting from {init.source} ({why}): a fresh softmax over the corpus's top "
            f"{int(config['vocab']['size']):,} words")
    return keep


def load_init_weights(bilm: ElmoBiLM, init: InitModel, keep_softmax: bool) -> None:
    """Copy the init model's weights into ``bilm`` (the softmax too when it is kept); a wider
    ``bilm`` (``[training] grow``) is grown from them."""
    if option_differences(init.bilm.options, bilm.options):
        grow_weights(bilm, init.bilm, keep_softmax)
        return
    state = {k: v for k, v in init.bilm.state_dict().items() if keep_softmax or not k.startswith("softmax.")}
    missing, unexpected = bilm.load_state_dict(state, strict=False)
    missing = [k for k in missing if keep_softmax or not k.startswith("softmax.")]
    if missing or unexpected:
        raise ValueError(f"paths.init {init.source}: weights do not fit (missing {missing}, unexpected {unexpected})")

