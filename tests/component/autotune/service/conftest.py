"""The service tests' fixtures (`tests.service_fixtures`): each test runs in its tmp_path."""

from tests.service_fixtures import (  # noqa: F401  (fixtures)
    _in_tmp_path,
    alice,
    bob,
    carol,
    client,
    db,
    notice_server,
    settings,
)
