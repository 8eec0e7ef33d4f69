"""The typed config, the byte form of the biLM, the converters and the atomic writes,
on a small random biLM built here (no shared files needed)."""
import json
import os
from pathlib import Path

import pytest
import torch

from spacy_elmo.bilm import BiLMConfig, ElmoBiLM, OptionsError, WeightsError
from spacy_elmo.bilm.serialize import state_to_bytes
from spacy_elmo.util import atomic_path, atomic_write_bytes, atomic_write_text

OPTIONS = {
    "lstm": {"dim": 8, "projection_dim": 4, "n_layers": 2, "cell_clip": 3, "proj_clip": 0,
             "use_skip_connections": True, "dropout": 0.1},
    "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 6]], "n_highway": 1, "activation": "relu",
                 "n_characters": 262, "max_characters_per_token": 50},
}
SENTENCES = [["The", "bank", "closed", "."], ["A", "river", "bank"]]


def random_bilm(vocab_size: int = 0) -> ElmoBiLM:
    torch.manual_seed(0)
    bilm = ElmoBiLM(OPTIONS, vocab_size=vocab_size, softmax_options={"type": "adaptive", "cutoffs": [5]} if vocab_size else None)
    with torch.no_grad():
        for p in bilm.parameters():
            p.uniform_(-0.5, 0.5)
    return bilm.eval()


def layers(bilm: ElmoBiLM) -> torch.Tensor:
    with torch.no_grad():
        return bilm(bilm.char_ids(SENTENCES), [len(s) for s in SENTENCES])


def test_config_reads_and_writes_both_forms() -> None:
    config = BiLMConfig.from_options(OPTIONS)
    assert (config.cell_dim, config.projection_dim, config.output_dim, config.n_output_layers) == (8, 4, 8, 3)
    assert config.cell_clip_value == 3.0 and config.proj_clip_value is None  # 0 means no clip
    assert config.to_options() == OPTIONS  # unused fields (lstm.dropout) are kept
    with_head = config.with_head(10, {"type": "adaptive", "cutoffs": [5]})
    assert BiLMConfig.from_dict(json.loads(json.dumps(with_head.to_dict()))) == with_head


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda o: o["lstm"].pop("dim"), r"\[lstm\]: missing option 'dim'"),
        (lambda o: o["lstm"].update(projection_dim=0), r"'projection_dim' must be a positive integer"),
        (lambda o: o["char_cnn"].update(filters=[[60, 2]]), r"filter width 60 exceeds"),
        (lambda o: o["char_cnn"].update(activation="gelu"), r"unknown activation 'gelu'"),
        (lambda o: o.update(char_cnn=[]), r"'char_cnn' must be a JSON object"),
    ],
)
def test_bad_options_are_named(change, message) -> None:
    options = json.loads(json.dumps(OPTIONS))
    change(options)
    with pytest.raises(OptionsError, match=message):
        BiLMConfig.from_options(options, source="my.json")


def test_shipped_config_is_read() -> None:
    path = Path(__file__).resolve().parent.parent / "spacy_elmo" / "models" / "en_elmo_cpu" / "config.json"
    data = json.loads(path.read_text())
    config = BiLMConfig.from_dict(data)
    assert config.vocab_size == data["vocab_size"] and config.softmax == data["softmax"]
    for key in ("lstm", "char_cnn"):
        assert config.to_dict()[key] == data[key]


def test_bytes_round_trip_is_exact() -> None:
    bilm = random_bilm(vocab_size=12)
    again = ElmoBiLM.from_bytes(bilm.to_bytes())
    assert again.config == bilm.config
    for name, value in bilm.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], value, rtol=0, atol=0)
    torch.testing.assert_close(layers(again.eval()), layers(bilm), rtol=0, atol=0)


def test_bad_bytes_are_named() -> None:
    bilm = random_bilm()
    with pytest.raises(WeightsError, match="not a safetensors file"):
        ElmoBiLM.from_bytes(b"\x01\x02garbage", "my bytes")
    with pytest.raises(WeightsError, match="carry no config"):
        ElmoBiLM.from_bytes(state_to_bytes(bilm.state_dict()), "my bytes")
    data = bytearray(bilm.to_bytes())
    with pytest.raises(WeightsError, match="my bytes"):
        ElmoBiLM.from_bytes(bytes(data[: len(data) // 2]), "my bytes")


def test_converters_round_trip(tmp_path: Path) -> None:
    bilm = random_bilm(vocab_size=12)
    bilm.save(tmp_path / "own", vocab=[f"w{i}" for i in range(12)], half=False)
    bilm.to_allennlp(tmp_path / "allennlp")
    assert json.loads((tmp_path / "allennlp" / "options.json").read_text()) == OPTIONS
    own = ElmoBiLM.load(tmp_path / "own")
    published = ElmoBiLM.from_allennlp(tmp_path / "allennlp" / "options.json", tmp_path / "allennlp" / "weights.hdf5")
    assert own.config == bilm.config and published.vocab_size == 0
    torch.testing.assert_close(layers(own.eval()), layers(bilm), rtol=0, atol=0)
    # The published layout stores the LSTM bias less TF's forget bias of 1: float rounding.
    torch.testing.assert_close(layers(published.eval()), layers(bilm), rtol=0, atol=1e-6)


def _import_graph(root: Path) -> dict:
    """Module -> the package modules it imports (anywhere in its body), from the source."""
    import ast

    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_pkg)
    graph = {}
    for name, (path, is_pkg) in modules.items():
        package = name if is_pkg else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                base = base[: len(base) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{mod}.{a.name}" for a in node.names] + [mod]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in modules and t != name:
                    edges.add(t)
                    break
        graph[name] = edges
    return graph


def test_no_import_circle() -> None:
    """No module of the package imports (directly or not) a module that imports it,
    and the converters do not import the model."""
    import spacy_elmo

    graph = _import_graph(Path(spacy_elmo.__file__).parent)
    packages = {n for n in graph if any(o.startswith(n + ".") for o in graph)}
    for start in graph:
        seen, stack = set(), [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start and not (start in packages or any(m in packages for m in trail)):
                    pytest.fail("import circle: " + " -> ".join(trail + [nxt]))
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
    for converter in ("spacy_elmo.bilm.serialize", "spacy_elmo.bilm.allennlp", "spacy_elmo.bilm.config"):
        assert "spacy_elmo.bilm.model" not in graph[converter]


def test_atomic_writes(tmp_path: Path) -> None:
    target = tmp_path / "file.bin"
    atomic_write_bytes(target, b"one")
    atomic_write_text(target, "two")
    old = os.umask(0o027)  # the mode follows the umask, as open() would
    try:
        atomic_write_text(tmp_path / "private.txt", "x")
    finally:
        os.umask(old)
    assert oct((tmp_path / "private.txt").stat().st_mode & 0o777) == oct(0o640)
    assert target.read_text() == "two" and oct(target.stat().st_mode & 0o777) == oct(0o666 & ~old)
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half-written")
            raise RuntimeError("writer failed")
    assert target.read_text() == "two"
    assert sorted(os.listdir(tmp_path)) == ["file.bin", "private.txt"]  # no temporary file left behind
    with atomic_path(tmp_path / "data.npz", suffix=".npz") as tmp:
        assert tmp.suffix == ".npz" and tmp.parent == tmp_path
        tmp.write_bytes(b"x")
    assert (tmp_path / "data.npz").read_bytes() == b"x"


def test_pipeline_model_bytes_round_trip_and_legacy_form() -> None:
    """The ElmoModel's bytes are ElmoBiLM.to_bytes; the msgpack form that spacy-elmo
    0.1 pipelines hold is still read."""
    import srsly
    from thinc.api import Model

    from spacy_elmo.layers.elmo_model import build_elmo_model_v1, get_bilm, set_bilm

    bilm = random_bilm()
    model = build_elmo_model_v1()
    assert get_bilm(model) is None
    empty = model.to_bytes()
    set_bilm(model, bilm)
    loaded: Model = build_elmo_model_v1().from_bytes(model.to_bytes())
    assert get_bilm(loaded).config == bilm.config
    torch.testing.assert_close(layers(get_bilm(loaded).eval()), layers(bilm), rtol=0, atol=0)
    assert get_bilm(build_elmo_model_v1().from_bytes(empty)) is None

    shim = build_elmo_model_v1().shims[0]
    legacy = {"config": bilm.config.to_dict(), "state": state_to_bytes(bilm.state_dict())}
    shim.from_bytes(srsly.msgpack_dumps({"config": shim.cfg, "state": srsly.msgpack_dumps(legacy)}))
    torch.testing.assert_close(layers(shim.module.eval()), layers(bilm), rtol=0, atol=0)
    with pytest.raises(WeightsError):
        shim.from_bytes(srsly.msgpack_dumps({"config": shim.cfg, "state": b"\x00" * 16}))


def test_prepare_removes_the_temp_file_a_killed_run_left(tmp_path: Path) -> None:
    from spacy_elmo.pretrain.corpus import build_corpus

    out = tmp_path / "train.npz"
    stale = tmp_path / ".train.npz.abc123.npz"  # what atomic_path leaves when SIGKILL hits mid-write
    stale.write_bytes(b"PK half")
    other = tmp_path / ".other.npz.abc123.npz"  # another file's temp: not ours to remove
    other.write_bytes(b"x")
    build_corpus([["a", "b"], ["c"]]).save(out)
    assert out.exists() and not stale.exists() and other.exists()
