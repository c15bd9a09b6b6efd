"""PyYAML's SafeLoader for the files a person writes (seed.yml, ollama-models.yaml, clouds.yaml), with a value it
parses but cannot construct a YAML error at its line, as a syntax error is.

SafeLoader raises a bare ValueError for an integer of more than 4300 digits (Python's int() guard) or a date such
as 2024-13-01: every reader catches YAMLError for its one-line message, so that ValueError was a traceback.
Imports nothing of gpu_rent: llm_models, which may import only leaves, uses it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml


class SafeLoader(yaml.SafeLoader):
    pass


def _marked(construct: Callable[[yaml.SafeLoader, yaml.Node], Any]) -> Callable[[yaml.SafeLoader, yaml.Node], Any]:
    # only the scalars' constructors: a reader's own error (llm_models' ModelsFileError is a ValueError too) raised
    # while its mappings are built must pass through as it is
    def construct_marked(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        try:
            return construct(loader, node)
        except ValueError as e:  # the first clause only: the rest of int()'s names sys.set_int_max_str_digits()
            raise yaml.constructor.ConstructorError(None, None, str(e).split(";")[0], node.start_mark) from None

    return construct_marked


for _tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"):
    SafeLoader.add_constructor(_tag, _marked(yaml.SafeLoader.yaml_constructors[_tag]))
