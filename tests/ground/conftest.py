import pytest

from tests.ground import test_molecule
from tests.groundkit import Cloud, connect, require_ground


def pytest_collection_modifyitems(session, config, items):
    """The Molecule scenarios start now, in the background, and their tests go last."""
    molecule = [item for item in items if item.module is test_molecule]
    if not molecule:
        return
    items[:] = [item for item in items if item.module is not test_molecule] + molecule
    if any(item.name.startswith("test_the_scenario_passes") for item in molecule):
        config.stash[test_molecule.MOLECULE_RUNS] = test_molecule.start_in_background()


@pytest.fixture(scope="session")
def member_conn():
    require_ground()
    return connect("ground")


@pytest.fixture(scope="session")
def admin_conn():
    require_ground()
    return connect("ground-admin")


@pytest.fixture
def cloud(member_conn):
    c = Cloud(member_conn)
    yield c
    c.close()


@pytest.fixture(scope="module")
def net(member_conn):
    require_ground()
    c = Cloud(member_conn)
    network, _ = c.network()
    yield network
    c.close()
