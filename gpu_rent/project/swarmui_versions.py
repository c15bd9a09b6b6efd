"""Which SwarmUI versions gpu-rent supports, and why: the one fact behind SWARMUI_VERSION's default and refusal.

The idle-killer reads every session's queue through `GetGlobalStatus`, which upstream added in commit
84996c70 (2025-09-02); the first tag with it is 0.9.8-Beta. 0.9.7-Beta and older answer that route
with `bad_route`, so the killer would see no generation at all and delete a VM while it works.
Seeding relies on extensions being built one by one at start (upstream ed16215b, also first in
0.9.8-Beta). The default is the upstream commit the roles, the idle-killer and the test ground's
stand-in were checked against, not the moving `master`.
"""

from __future__ import annotations

import re

# mcmonkeyprojects/SwarmUI master on 2026-08-21 (its src/SwarmUI.csproj says 0.9.8.2).
PINNED = "062407c7bb488fc76ac61044cb929f0d0a30e60f"
PINNED_LABEL = "062407c7 (0.9.8.2, 2026-08-21)"
# The oldest release with GetGlobalStatus (and start-time extension builds).
MINIMUM = (0, 9, 8)
MINIMUM_LABEL = "0.9.8-Beta"

# A release name: 0.9.7-Beta, v0.9.6, 0.9.4.0-Beta, 0.9.8.2 (a SwarmUI version string).
_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)?(?:-[A-Za-z0-9.]+)?")


def release(version: str) -> tuple[int, int, int] | None:
    """The (major, minor, patch) a release name stands for; None for a branch or a commit."""
    match = _RELEASE.fullmatch(version.strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def refusal(version: str) -> str | None:
    """Why this SWARMUI_VERSION cannot be used, in words; None when it may (a branch or commit is not judged)."""
    known = release(version)
    if known is None or known >= MINIMUM:
        return None
    return (
        f"SWARMUI_VERSION={version} is older than {MINIMUM_LABEL}, the first release with GetGlobalStatus: "
        f"the idle-killer could not see a running generation. Use {MINIMUM_LABEL} or newer, "
        f"or leave SWARMUI_VERSION empty for {PINNED_LABEL}"
    )
