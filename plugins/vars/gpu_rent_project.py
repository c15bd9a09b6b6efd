"""Vars plugin: a gpu-rent project's configuration for every play.

Playbooks read the same configuration as the CLI with no -e flags: this
plugin loads `.env` and `gpu-rent.vars` from the project folder (the working
directory, or GPU_RENT_PROJECT) through gpu_rent.project.settings, validates them the
same way, and exposes every setting as `gpu_rent_<key>`. It is loaded from the
collection, or from playbooks/vars_plugins next to the playbooks when an
operator runs `ansible-playbook <repo>/playbooks/stop.yml` directly.
"""

from __future__ import annotations

DOCUMENTATION = """
name: gpu_rent_project
short_description: Settings of the gpu-rent project folder as gpu_rent_* variables
description:
  - Reads C(.env) and C(gpu-rent.vars) of the project folder (GPU_RENT_PROJECT or the working directory).
  - Contributes nothing outside a gpu-rent project folder.
options: {}
"""

import json
import os
import sys
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.vars import BaseVarsPlugin

try:
    from gpu_rent.project import settings as config
    from gpu_rent.project.errors import ConfigError
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gpu_rent.project import settings as config
    from gpu_rent.project.errors import ConfigError

_cache: dict[str, dict] = {}


def project_vars() -> dict:
    project = Path(os.environ.get("GPU_RENT_PROJECT") or os.getcwd()).resolve()
    key = str(project)
    if key not in _cache:
        if not (project / "gpu-rent.vars").is_file():
            _cache[key] = {}
        else:
            # The CLI hands over the resolved auth in a 0600 file, so no secret travels in the
            # environment that ansible-runner records; the file goes as soon as it is read.
            auth_file = os.environ.get("GPU_RENT_AUTH_FILE")
            try:
                settings = config.load(project, with_cloud=not auth_file)
                found = settings.ansible_vars()
                if settings.cloud is not None:  # a direct run: resolve "auto" here, as the CLI does
                    found["gpu_rent_operator_cidr"] = settings.resolved_operator_cidr()
            except ConfigError as e:
                raise AnsibleError(f"gpu-rent configuration: {e}") from None
            if auth_file:
                path = Path(auth_file)
                try:
                    found["gpu_rent_cloud_auth"] = json.loads(path.read_text())
                except (OSError, ValueError) as e:
                    raise AnsibleError(f"gpu-rent: the cloud auth handed over by the CLI is unreadable: {e}") from None
                path.unlink(missing_ok=True)
            # Module arguments (the cloud password among them) go to the module on its stdin, never into an
            # AnsiballZ file under ~/.ansible/tmp, where a killed run would leave them for good.
            found["ansible_pipelining"] = True
            _cache[key] = found
    return _cache[key]


class VarsModule(BaseVarsPlugin):
    REQUIRES_ENABLED = False

    def get_vars(self, loader, path, entities, cache=True):
        super().get_vars(loader, path, entities)
        return dict(project_vars())
