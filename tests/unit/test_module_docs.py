"""Each module of the collection documents itself in YAML that parses (ansible-doc reads it), and
documents every option its argument_spec takes: a `: ` inside a plain description line once broke two."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.module_file import load

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_the_module_documents_every_option_in_yaml_that_parses(path):
    module = load(f"doc_{path.stem}", path)
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == path.stem and doc["short_description"] and doc["description"]
    for part in ("RETURN", "EXAMPLES"):
        if getattr(module, part, None):
            yaml.safe_load(getattr(module, part))
    spec = next((c.argument_spec for c in vars(module).values() if isinstance(getattr(c, "argument_spec", None), dict)),
                None)  # fmt: skip
    if spec is not None:  # an OpenStackModule's own options (auth, timeout...) come from its doc fragment
        assert set(spec) <= set(doc.get("options") or {}), set(spec) - set(doc.get("options") or {})
