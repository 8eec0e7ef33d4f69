"""Check spacy-elmo's entry points in a fresh interpreter (run by test_entry_points.py).

Usage: python entry_point_check.py PYPROJECT

Reads the entry-point groups that PYPROJECT declares, then, before spacy_elmo is
imported by anything but an entry point:

1. the installed metadata of the spacy-elmo distribution declares the same groups,
   names and targets (else the install is stale: reinstall);
2. spaCy's registry resolves every declared name through ``importlib.metadata`` to
   the object the entry point loads (factories: once ``spacy.blank`` has loaded the
   ``spacy_factories`` entry points, as spaCy does);
3. every function spacy_elmo registers with a decorator (all its modules imported)
   has an entry point under the same name in the matching group, that entry point
   loads the same function, and every declared name is registered by the package:
   a misspelled or missing name in PYPROJECT fails here.

Prints one line per problem and exits 1, or prints "ok N" (N names checked).
"""
import importlib
import importlib.metadata as metadata
import pkgutil
import sys
from typing import Dict, List, Tuple

try:
    import tomllib
except ImportError:  # Python < 3.11 (pytest depends on tomli there)
    import tomli as tomllib

DIST = "spacy-elmo"
PACKAGE = "spacy_elmo"
# spaCy keeps the factories the decorator registers apart from the entry-point group.
NAMESPACE_OF_GROUP = {"spacy_factories": ("spacy", "internal_factories")}


def namespace_of(group: str) -> Tuple[str, str]:
    return NAMESPACE_OF_GROUP.get(group, ("spacy", group[len("spacy_"):]))


def group_of(namespace: Tuple[str, ...]) -> str:
    for group, ns in NAMESPACE_OF_GROUP.items():
        if ns == namespace:
            return group
    return "_".join(namespace)


def main(pyproject: str) -> List[str]:
    with open(pyproject, "rb") as f:
        declared: Dict[str, Dict[str, str]] = tomllib.load(f)["project"].get("entry-points", {})
    problems = []
    for group in declared:
        if not group.startswith("spacy_"):
            problems.append(f"group {group!r}: not a spaCy registry group (spacy_<registry>)")

    import spacy  # noqa: F401
    from spacy.util import registry

    registry.ensure_populated()
    if PACKAGE in sys.modules:
        return problems + [f"{PACKAGE} was imported before any of its entry points was loaded"]

    installed: Dict[str, Dict[str, str]] = {}
    for ep in metadata.distribution(DIST).entry_points:
        if ep.group.startswith("spacy_"):
            installed.setdefault(ep.group, {})[ep.name] = ep.value
    if installed != declared:
        problems.append(f"installed entry points {installed} differ from {pyproject} {declared}: reinstall the package")

    def entry_point(group: str, name: str) -> object:
        found = [ep for ep in metadata.entry_points(group=group) if ep.name == name]
        if len(found) != 1:
            raise LookupError(f"{len(found)} entry points named {name!r} in group {group!r}")
        return found[0].load()

    checked = 0
    # Factories last: spacy.blank loads every spacy_factories entry point.
    for group in sorted(declared, key=lambda g: g == "spacy_factories"):
        if group == "spacy_factories":
            spacy.blank("xx")
        reg_name = namespace_of(group)[1] if group != "spacy_factories" else "factories"
        for name, target in declared[group].items():
            try:
                want = entry_point(group, name)
                got = registry.get(reg_name, name)
            except Exception as err:  # noqa: BLE001 (every failure is a finding)
                problems.append(f"{group} {name!r} ({target}): {type(err).__name__}: {err}")
                continue
            if got is not want:
                problems.append(f"{group} {name!r}: registry.get({reg_name!r}) gives {got!r}, the entry point {want!r}")
            checked += 1

    # Everything the package registers, with all its modules imported.
    package = importlib.import_module(PACKAGE)
    for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    import catalogue

    for key, func in list(catalogue.REGISTRY.items()):
        namespace, name = key[:-1], key[-1]
        if not (name.startswith("spacy-elmo.") or getattr(func, "__module__", "").startswith(PACKAGE)):
            continue
        group = group_of(namespace)
        if name not in declared.get(group, {}):
            problems.append(f"{'.'.join(namespace)} {name!r} ({func.__module__}.{func.__qualname__}) has no "
                            f"entry point in [project.entry-points.{group}]")
            continue
        try:
            want = entry_point(group, name)
        except Exception as err:  # noqa: BLE001
            problems.append(f"{group} {name!r}: {type(err).__name__}: {err}")
            continue
        if want is not func:
            problems.append(f"{group} {name!r} loads {want!r}, but that name is registered to {func!r}")
    for group, names in declared.items():
        for name in names:
            if not catalogue.check_exists(*namespace_of(group), name):
                problems.append(f"{group} {name!r} is declared, but {PACKAGE} registers no function under that name")
    if not problems:
        print(f"ok {checked}")
    return problems


if __name__ == "__main__":
    found = main(sys.argv[1])
    for line in found:
        print(line)
    sys.exit(1 if found else 0)
