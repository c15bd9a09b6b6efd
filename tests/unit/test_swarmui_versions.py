"""Which SwarmUI versions are refused before anything is rented (gpu_rent/project/swarmui_versions.py)."""

import pytest

from gpu_rent.project import swarmui_versions
from gpu_rent.project.swarmui_versions import refusal, release


@pytest.mark.parametrize(
    ("version", "parsed"),
    [
        ("0.9.7-Beta", (0, 9, 7)),
        ("0.9.8-Beta", (0, 9, 8)),
        ("v0.9.6", (0, 9, 6)),
        ("0.9.4.0-Beta", (0, 9, 4)),
        ("0.9.8.2", (0, 9, 8)),
        ("0.9.8.2-standin", (0, 9, 8)),
        ("0.10", (0, 10, 0)),
        ("master", None),
        ("main", None),
        (swarmui_versions.PINNED, None),
        ("062407c7", None),
        ("feature/0.9.7-fix", None),
    ],
)
def test_release_names_are_read_and_branches_and_commits_are_not(version, parsed):
    assert release(version) == parsed


@pytest.mark.parametrize("version", ["0.9.7-Beta", "0.9.6", "v0.5.9-Alpha", "0.9.4.0-Beta", "0.9"])
def test_releases_before_get_global_status_are_refused(version):
    why = refusal(version)
    assert why is not None
    assert why.startswith(f"SWARMUI_VERSION={version} is older than 0.9.8-Beta")
    assert "\n" not in why


@pytest.mark.parametrize("version", ["0.9.8-Beta", "0.9.8.2", "1.0.0", "master", swarmui_versions.PINNED])
def test_supported_or_unjudged_versions_pass(version):
    assert refusal(version) is None


def test_the_default_is_the_pinned_commit_not_a_moving_branch():
    from gpu_rent.project.keys import KEYS

    assert KEYS["SWARMUI_VERSION"].default == swarmui_versions.PINNED
    assert len(swarmui_versions.PINNED) == 40 and all(c in "0123456789abcdef" for c in swarmui_versions.PINNED)
