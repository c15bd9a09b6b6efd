"""doctor's probe of the idle-killer's access rule (cloud/killer_proof.py): the rule's path and what Nova's
answer means; the probe itself against the ground's real Keystone and Nova in tests/ground/test_preflight.py."""

from __future__ import annotations

import pytest

from gpu_rent.cloud.killer_proof import rule_path, verdict


@pytest.mark.parametrize(
    ("url", "path"),
    [("https://ru-7.cloud.api.selcloud.ru/compute/v2.1", "/compute/v2.1/servers/s"),
     ("http://10.0.0.1:8774/v2.1/", "/v2.1/servers/s"), ("http://10.0.0.1:8774", "/v2.1/servers/s")],
)  # fmt: skip
def test_the_rule_path_is_the_compute_endpoints_own_path_as_the_credential_module_builds_it(url, path):
    assert rule_path(url, "s") == path


@pytest.mark.parametrize(
    ("code", "ok", "words"),
    [(404, True, "Nova enforces the killer's access rule at /p"),
     (401, False, "does not match an access rule to the path it sees (a gateway before Nova? set idle_killer_rule"),
     (403, False, "the cloud's policy forbids GET /p"), (500, False, "HTTP 500")],
)  # fmt: skip
def test_nova_matching_the_rule_answers_404_for_a_server_no_one_has(code, ok, words):
    said = verdict(code, "/p")
    assert said[0] is ok and words in said[1]
