"""CI: the modules pyproject.toml still exempts from strict typing (its one [[tool.mypy.overrides]] block of ticketcli
modules) must all still need it. Runs mypy with the project's configuration less that block, prints each listed
module's count of strict errors, and fails when a listed module has none: it is converted, so its line goes (the
list only shrinks; the block goes with its last line, and then every module must be strict-clean). An unlisted
module with errors fails too (plain `mypy`, run before this, already fails it).

    python .ci/mypy_not_yet_strict.py        # from the repository root
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise SystemExit(f"mypy_not_yet_strict: cannot write {v!r} back as TOML")


def table(header: str, values: dict[str, object]) -> str:
    return "\n".join([header, *(f"{k} = {toml_value(v)}" for k, v in values.items())]) + "\n"


def module_of(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def main() -> int:
    cfg = dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"])
    overrides = cfg.pop("overrides", [])
    ours = [o for o in overrides if any(m.startswith("ticketcli") for m in o["module"])]
    if len(ours) > 1:
        print("error: pyproject.toml must have at most one [[tool.mypy.overrides]] block of ticketcli modules")
        return 1
    listed = set(ours[0]["module"]) if ours else set()  # no block: every module is strict
    kept = [o for o in overrides if all(o is not b for b in ours)]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "strict.toml"
        config.write_text("\n".join([table("[tool.mypy]", cfg), *(table("[[tool.mypy.overrides]]", o) for o in kept)]))
        run = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(config), *cfg.get("files", ["ticketcli"])],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    if run.returncode not in (0, 1) or "error: " in run.stderr:
        print(run.stdout + run.stderr)
        return 1
    counts = Counter(
        module_of(m.group(1)) for m in re.finditer(r"^([^:\s]+\.py):\d+: error:", run.stdout, re.MULTILINE)
    )
    for module in sorted(listed):
        print(f"{counts.get(module, 0):4d}  {module}")
    print(f"{sum(counts[m] for m in listed)} strict errors in {len(listed)} modules not yet strict")
    clean = sorted(m for m in listed if counts.get(m, 0) == 0)
    unlisted = sorted(m for m in counts if m not in listed)
    if clean:
        print(f"error: strict-clean now, delete from [[tool.mypy.overrides]] in pyproject.toml: {', '.join(clean)}")
    if unlisted:
        print(f"error: strict errors in modules outside the list (run `mypy`): {', '.join(unlisted)}")
    return 1 if clean or unlisted else 0


if __name__ == "__main__":
    sys.exit(main())
