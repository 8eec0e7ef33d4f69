"""The README's test command is what CI runs."""
import re

from conftest import REPO


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    test_cmds = [b for b in blocks if "pytest" in b]
    assert len(test_cmds) == 1, test_cmds
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert test_cmds[0].strip() in ci.splitlines()
