"""Every function spacy-elmo registers (``spacy-elmo.*`` names) has a documented config, in
README.md, docs/*.md (``ini`` blocks), configs/**/*.cfg or its own docstring, and that config
text builds through spaCy's registry into an object of the documented return type. Nothing
is loaded or downloaded: loaders are built, never called."""
import collections.abc
import importlib
import pkgutil
import re
import textwrap
import typing
from typing import Any, Dict, Iterator, List, Tuple

import catalogue
import pytest
from spacy.util import registry
from thinc.api import Config

import spacy_elmo
from conftest import REPO

PREFIX = "spacy-elmo."
Registered = Dict[Tuple[str, str], Any]  # (registry, name) -> function
Documented = List[Tuple[str, str, dict, str]]  # (registry, name, block, where)


def registered_functions() -> Registered:
    """Every ``spacy-elmo.*`` entry of spaCy's registries, all package modules imported."""
    for info in pkgutil.walk_packages(spacy_elmo.__path__, "spacy_elmo."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    return {(key[1], key[-1]): func for key, func in catalogue.REGISTRY.items()
            if len(key) == 3 and key[0] == "spacy" and key[-1].startswith(PREFIX)}


def with_parent_sections(text: str) -> str:
    """A config snippet with the parents of its sections added ([a.b] needs [a])."""
    sections = re.findall(r"^\[([^\]\n]+)\]\s*$", text, flags=re.M)
    have = set(sections)
    missing = []
    for section in sections:
        parts = section.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in have:
                have.add(parent)
                missing.append(parent)
    return "".join(f"[{p}]\n\n" for p in missing) + text


def config_texts(extra_docstrings: Registered) -> Iterator[Tuple[str, str]]:
    """(where, config text) of every documented config."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```(?:ini|cfg|toml)\n(.*?)```", text, flags=re.S)):
            yield f"{path.relative_to(REPO)} block {i + 1}", block
    for path in sorted((REPO / "configs").rglob("*.cfg")):
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")
    for (_, name), func in extra_docstrings.items():
        doc = textwrap.dedent("\n".join((func.__doc__ or "").splitlines()[1:]))
        for i, block in enumerate(re.findall(r"^(\[[^\]\n]+\]\n(?:[^\n]+\n?)+)", doc, flags=re.M)):
            yield f"docstring of {name} block {i + 1}", block


def blocks_of(node: Any, where: str) -> Iterator[Tuple[str, str, dict, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key.startswith("@") and isinstance(value, str) and value.startswith(PREFIX):
                yield key[1:], value, node, where
            else:
                yield from blocks_of(value, where)


def documented_configs(functions: Registered) -> Documented:
    found: Documented = []
    for where, text in config_texts(functions):
        config = Config().from_str(with_parent_sections(text))
        found.extend(blocks_of(config, where))
    return found


def undocumented(functions: Registered, documented: Documented) -> List[str]:
    have = {(reg, name) for reg, name, _, _ in documented}
    return sorted(f"{reg} {name}" for reg, name in functions if (reg, name) not in have)


def assert_returns(func: Any, built: Any, where: str) -> None:
    """``built`` is what ``func``'s return annotation promises (Model, Callable...)."""
    ret = typing.get_type_hints(func)["return"]
    origin = typing.get_origin(ret) or ret
    if origin is collections.abc.Callable:
        assert callable(built) and not isinstance(built, type), (where, built)
    else:
        assert isinstance(built, origin), (where, type(built), origin)


def build(block: dict) -> Any:
    return registry.resolve(Config({"built": block}))["built"]


FUNCTIONS = registered_functions()
DOCUMENTED = documented_configs(FUNCTIONS)


def test_every_registered_function_has_a_documented_config():
    assert {name for _, name in FUNCTIONS} >= {"spacy-elmo.ElmoModel.v1", "spacy-elmo.ElmoListener.v1",
                                               "spacy-elmo.AllenNLPLoader.v1", "spacy-elmo.ElmoLoader.v1",
                                               "spacy-elmo.PublishedLoader.v1"}
    missing = undocumented(FUNCTIONS, DOCUMENTED)
    assert not missing, f"registered without a documented config (README, docs/*.md ini block, configs/*.cfg or the docstring): {missing}"
    strays = sorted({f"{reg} {name} ({where})" for reg, name, _, where in DOCUMENTED if (reg, name) not in FUNCTIONS})
    assert not strays, f"documented but not registered: {strays}"


@pytest.mark.parametrize("reg,name,block,where", DOCUMENTED, ids=[f"{n}@{w}" for _, n, _, w in DOCUMENTED])
def test_documented_config_builds(reg, name, block, where):
    assert_returns(FUNCTIONS[(reg, name)], build(block), where)


def test_a_new_registration_without_documentation_fails(tmp_path):
    """The check can fail: a function registered without any documented config is reported;
    one whose docstring holds its config is not, and that config builds."""
    from thinc.api import Model

    def undocumented_v1(width: int) -> Model:
        """A layer."""
        return Model("x", lambda model, X, is_train: (X, lambda d: d), dims={"nO": width})

    def documented_v1(width: int) -> Model:
        """A layer.

        [components.x.model]
        @architectures = "spacy-elmo.DocumentedTest.v1"
        width = 8
        """
        return Model("y", lambda model, X, is_train: (X, lambda d: d), dims={"nO": width})

    names = {"spacy-elmo.UndocumentedTest.v1": undocumented_v1, "spacy-elmo.DocumentedTest.v1": documented_v1}
    for name, func in names.items():
        registry.architectures.register(name, func=func)
    try:
        functions = registered_functions()
        documented = documented_configs(functions)
        assert undocumented(functions, documented) == ["architectures spacy-elmo.UndocumentedTest.v1"]
        (block,) = [b for reg, n, b, _ in documented if n == "spacy-elmo.DocumentedTest.v1"]
        assert build(block).get_dim("nO") == 8
    finally:
        for name in names:
            catalogue.REGISTRY.pop(("spacy", "architectures", name), None)
    assert undocumented(registered_functions(), DOCUMENTED) == []
