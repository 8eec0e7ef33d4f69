"""Run a command and write its wall-clock time to a JSON file.

    python scripts/timed.py training/ner/timing.json -- python -m spacy train configs/ner.cfg ...

Writes ``{"seconds": ..., "command": [...], "returncode": ..., "finished": ...}``, also when the
command fails (then exits with its return code). A leading ``python`` in the command is replaced
by the interpreter running this script, as ``spacy project run`` does for its own scripts, so the
timed command runs in the same environment.
"""
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import List


def run_timed(output: Path, command: List[str]) -> int:
    if not command:
        raise ValueError("no command given")
    if command[0] in ("python", "python3"):
        command = [sys.executable] + list(command[1:])
    start = time.perf_counter()
    returncode = subprocess.call(command)
    seconds = time.perf_counter() - start
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "seconds": round(seconds, 2),
        "command": [Path(command[0]).name] + list(command[1:]),
        "returncode": returncode,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return returncode


def main(argv: List[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        print("usage: python scripts/timed.py OUTPUT.json -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run_timed(Path(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
