"""Where this checkout keeps the collection beside the package: playbooks, roles, plugins, examples.

gpu-rent runs from a checkout (pip install -e), so the wrapper and the collection it drives are one tree.
"""

from pathlib import Path

# gpu_rent/util/checkout.py -> the checkout
ROOT = Path(__file__).resolve().parents[2]
