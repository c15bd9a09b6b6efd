import pytest

from tests.groundkit import Cloud, connect, require_ground


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
