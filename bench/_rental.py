"""How a bench ends the rental it made in a copy of the ground's project: destroyed, its folder removed; a destroy
that fails leaves both for a destroy by hand and says so."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.ground.test_rental import gpu_rent


def destroyed(project: Path, tmp: Path) -> bool:
    """`gpu-rent destroy --i-understand-data-loss` of the bench's project; True when nothing is left."""
    result = gpu_rent(project, "destroy", "--i-understand-data-loss", "--no-pull")
    if result.returncode == 0:
        shutil.rmtree(tmp)
        return True
    print(f"gpu-rent destroy failed (rc {result.returncode}); the project stays in {project} for a destroy by hand:\n"
          f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")  # fmt: skip
    return False
