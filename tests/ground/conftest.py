import pytest

from tests.ground import molecule_runs
from tests.groundkit import Cloud, connect, ground_missing, require_ground


def pytest_configure(config):
    config.stash[molecule_runs.KEY] = molecule_runs.Background()


def pytest_collection_finish(session):
    """What runs in the background from now, when a test to run needs it: the Molecule scenarios
    (molecule_runs.py says why) and the fault suite's up walk (test_faults.Walk)."""
    if session.config.option.collectonly or ground_missing() is not None:
        return
    needed = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    if "runs" in needed and any(item.path.name == "test_molecule.py" for item in session.items):
        session.config.stash[molecule_runs.KEY].start()
    if "walk" in needed and any(item.path.name == "test_faults.py" for item in session.items):
        from tests.ground import test_faults

        session.config.stash.setdefault(test_faults.WALK, test_faults.Walk()).start()


def pytest_sessionfinish(session):
    """Nothing begun in the background is left renting after the session (an interrupted one starts
    no scenario that had not begun)."""
    from tests.ground import test_faults

    try:
        session.config.stash[molecule_runs.KEY].stop()
    finally:
        walk = session.config.stash.get(test_faults.WALK, None)
        if walk is not None:
            walk.destroy()


@pytest.fixture(scope="session")
def molecule_quiet(pytestconfig):
    """Call it before taking a cloud API away: the background scenarios have ended by then."""
    return pytestconfig.stash[molecule_runs.KEY].wait


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


@pytest.fixture(scope="session")
def bootstrapped(member_conn, tmp_path_factory):
    """One host through playbooks/bootstrap.yml, shared by test_bootstrap.py and test_swarmui_role.py (a
    rental and a first bootstrap fewer): ((address, data volume id), the first run). Each module leaves
    it converged; the idle-killer is not armed on it (a run with an -i inventory)."""
    from tests.ground.test_bootstrap import rent_host, run_bootstrap

    cloud = Cloud(member_conn)
    try:
        network, _ = cloud.network()
        rented = rent_host(cloud, network)
        yield rented, run_bootstrap(rented, tmp_path_factory.mktemp("bootstrap"))
    finally:
        cloud.close()


@pytest.fixture(scope="module")
def net(member_conn):
    require_ground()
    c = Cloud(member_conn)
    network, _ = c.network()
    yield network
    c.close()
