"""The CLI asks up's lookup as playbooks/up.yml asks rental_lookup (gpu_rent/up_lookup.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleValueOmittedError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from gpu_rent import config, up_lookup

UP = Path(__file__).resolve().parents[2] / "playbooks" / "up.yml"
AUTH = ("auth", "auth_type", "region_name", "interface")


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def playbook_questions(settings: config.Settings) -> dict:
    """The rental_lookup task's options, rendered with the project's variables (an omitted one as None)."""
    task = next(t for t in yaml.safe_load(UP.read_text())[0]["pre_tasks"] if "rental_lookup" in t)
    templar = Templar(loader=DataLoader(), variables=settings.ansible_vars())
    rendered = {}
    for key, value in task["rental_lookup"].items():
        if key in AUTH:
            continue
        try:
            rendered[key] = templar.template(_trusted(value))
        except AnsibleValueOmittedError:
            rendered[key] = None
    return rendered


@pytest.mark.parametrize(
    "extra",
    ["", "POOL_FALLBACK=ru-7b,ru-9a\nFLAVOR_FALLBACK=gpu.l4.1\nEXTERNAL_NETWORK=ext-net\nNAME=lab\n"],
)
def test_the_cli_asks_what_the_playbook_asks(dead_cloud_project, extra):
    vars_file = dead_cloud_project / "gpu-rent.vars"
    vars_file.write_text(vars_file.read_text() + extra)
    settings = config.load(dead_cloud_project, with_cloud=False)
    assert {k: list(v) if isinstance(v, list) else v for k, v in playbook_questions(settings).items()} == (
        up_lookup.questions(settings)
    )


def test_the_shared_lookup_is_the_collections_file_and_knows_every_question(dead_cloud_project):
    shared = up_lookup._shared()
    assert Path(shared.__file__) == Path(__file__).resolve().parents[2] / "plugins/module_utils/gpu_rent_lookup.py"
    settings = config.load(dead_cloud_project, with_cloud=False)
    assert set(up_lookup.questions(settings)) <= set(shared.QUESTIONS)
