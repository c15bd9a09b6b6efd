"""The repository root is an Ansible collection that builds and carries what a play needs."""

import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_collection_builds_with_roles_playbooks_and_the_vars_plugin(tmp_path):
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    result = subprocess.run(
        [str(galaxy), "collection", "build", str(REPO), "--output-path", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (archive,) = tmp_path.glob("gpu_rent-rental-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for needed in (
        "roles/server/tasks/main.yml",
        "roles/server/meta/argument_specs.yml",
        "playbooks/up.yml",
        "playbooks/stop.yml",
        "plugins/vars/gpu_rent_project.py",
        "gpu_rent/project/settings.py",  # the vars plugin validates with the same code as the CLI
        "meta/runtime.yml",
    ):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "ground/", ".ground/", ".venv/")) for n in names)


def test_every_role_declares_its_arguments_and_prefixes_its_variables():
    import yaml

    for role in sorted((REPO / "roles").iterdir()):
        entries = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        # a role used only through tasks_from (vm_stamp) declares its options per entry point
        specs = {"options": {k: v for entry in entries.values() for k, v in entry.get("options", {}).items()}}
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        for name in defaults:
            assert name.startswith(f"{role.name}_"), f"{role.name}: {name} lacks the role prefix"
            assert name in specs["options"], f"{role.name}: {name} not in meta/argument_specs.yml"
        comments = [line for line in (role / "defaults" / "main.yml").read_text().splitlines() if line.startswith("#")]
        assert len(comments) >= len(defaults), f"{role.name}: every default needs its one-line comment"


def test_the_configuration_page_documents_every_setting():
    from gpu_rent.project.keys import KEYS

    page = (REPO / "docs" / "configuration.md").read_text()
    missing = [key for key in KEYS if f"`{key}`" not in page]
    assert missing == []
