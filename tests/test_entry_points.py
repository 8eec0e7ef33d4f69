"""Entry points: every name in pyproject.toml resolves through importlib.metadata in a
fresh interpreter, before spacy_elmo is imported (see entry_point_check.py)."""
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

CHECK = Path(__file__).with_name("entry_point_check.py")

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib


def run_check(pyproject: Path, pythonpath: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(CHECK), str(pyproject)], capture_output=True, text=True, env=env,
                          cwd=str(pyproject.parent))


def test_entry_points_resolve_in_a_fresh_interpreter():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    assert {"spacy_factories", "spacy_architectures", "spacy_misc"} <= set(declared)
    res = run_check(REPO / "pyproject.toml")
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.split() == ["ok", str(sum(len(names) for names in declared.values()))]


def test_entry_point_check_fails_on_a_misspelled_or_missing_name(tmp_path):
    """The check itself can fail: a pyproject.toml (and the metadata installed from it)
    with a misspelled architecture and without one loader, shadowing the real install."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    broken = text.replace('"spacy-elmo.ElmoModel.v1" =', '"spacy-elmo.ElmoModle.v1" =')
    broken = "\n".join(line for line in broken.splitlines() if not line.startswith('"spacy-elmo.PublishedLoader.v1"'))
    assert broken.count("ElmoModle") == 1 and "PublishedLoader" not in broken
    (tmp_path / "pyproject.toml").write_text(broken, encoding="utf-8")
    project = tomllib.loads(broken)["project"]
    dist_info = tmp_path / "site" / f"spacy_elmo-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: spacy-elmo\nVersion: {project['version']}\n")
    lines = []
    for group, names in project["entry-points"].items():
        lines += [f"[{group}]"] + [f"{name} = {value}" for name, value in names.items()] + [""]
    (dist_info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    res = run_check(tmp_path / "pyproject.toml", pythonpath=str(tmp_path / "site"))
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]
    out = res.stdout
    assert "'spacy-elmo.ElmoModel.v1'" in out and "no entry point in [project.entry-points.spacy_architectures]" in out
    assert "'spacy-elmo.ElmoModle.v1' is declared, but spacy_elmo registers no function under that name" in out
    assert "'spacy-elmo.PublishedLoader.v1'" in out and "[project.entry-points.spacy_misc]" in out
    assert "reinstall" not in out  # the shadowing metadata is the one read
