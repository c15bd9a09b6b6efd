"""The docs and examples/gpu-rent.vars stay in step with the code: every setting with its default, every command.

README.md is the door; the example file is shown in docs/configuration.md, the commands in docs/commands.md.
"""

import re
import shutil
from pathlib import Path

import typer

from gpu_rent.cli.app import app
from gpu_rent.project import settings as config
from gpu_rent.project.keys import KEYS, REQUIRED, VARS_FILE

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpu-rent.vars"
README = REPO / "README.md"
DOCS = REPO / "docs"
CONFIGURATION = DOCS / "configuration.md"
COMMANDS = DOCS / "commands.md"
LINE = re.compile(r"^(# )?([A-Z][A-Z0-9_]*)=(.*)$")


def _shown(default) -> str:
    """A default as it is written in gpu-rent.vars."""
    if default is None:
        return ""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ",".join("=".join(item) if isinstance(item, tuple) else item for item in default)
    return str(default)


def _example_lines() -> dict[str, tuple[bool, str]]:
    """KEY -> (commented out, value) for every KEY=VALUE line of the example, commented or not."""
    found = {}
    for text in EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = LINE.match(text)
        if match:
            assert match[2] not in found, f"{match[2]} is in the example twice"
            found[match[2]] = (match[1] is not None, match[3])
    return found


def test_the_example_lists_every_key_with_its_default():
    lines = _example_lines()
    assert set(lines) == set(KEYS)
    for key, spec in KEYS.items():
        commented, value = lines[key]
        if spec.default is REQUIRED:
            assert not commented and value, f"{key} is required: the example must set it"
        else:
            assert commented, f"{key} is optional: the example shows it commented out"
            assert value == _shown(spec.default), f"{key}: the example shows {value!r}, the default is {spec.default!r}"


def test_the_example_loads_and_its_shown_defaults_are_the_defaults(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / VARS_FILE)
    as_is = config.load(tmp_path, with_cloud=False)
    # every commented default switched on must give exactly what leaving it out gives
    text = EXAMPLE.read_text(encoding="utf-8")
    (tmp_path / VARS_FILE).write_text(re.sub(r"(?m)^# ([A-Z][A-Z0-9_]*=)", r"\1", text), encoding="utf-8")
    switched_on = config.load(tmp_path, with_cloud=False)
    assert as_is == switched_on
    for key, spec in KEYS.items():
        if spec.default is not REQUIRED:
            assert getattr(as_is, key.lower()) == spec.default, key


def _code_blocks(page: Path) -> list[str]:
    return re.findall(r"(?ms)^```[a-z]*\n(.*?)^```$", page.read_text(encoding="utf-8"))


def test_the_configuration_page_shows_the_example_file_as_it_is():
    example = EXAMPLE.read_text(encoding="utf-8")
    first = example.splitlines()[0]
    shown = {
        page: [block for block in _code_blocks(page) if block.startswith(first)]
        for page in [README, *DOCS.glob("*.md")]
    }
    pages = [page.relative_to(REPO).as_posix() for page, blocks in shown.items() if blocks]
    assert pages == ["docs/configuration.md"], "docs/configuration.md, and no other page, shows examples/gpu-rent.vars"
    assert len(shown[CONFIGURATION]) == 1, "docs/configuration.md shows the example in one code block"
    assert shown[CONFIGURATION][0] == example


def test_the_command_reference_names_every_command():
    reference = COMMANDS.read_text(encoding="utf-8")
    section = reference.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    group = typer.main.get_command(app)
    commands = [name for name, command in group.commands.items() if not command.hidden]
    assert len(commands) > 10
    missing = [name for name in commands if f"`gpu-rent {name}" not in section]
    assert missing == []
