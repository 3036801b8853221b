# Make the e2e fixtures available when e2e/tests is run on its own; a
# top-level conftest may also load e2e.pytest_plugin (the session cluster is
# shared either way).
from e2e.pytest_plugin import cluster, kubectl, namespace, pytest_configure, pytest_sessionfinish  # noqa: F401

import pytest

from e2e.tests.lifecycle_helpers import Env, operator


@pytest.fixture
def env(cluster, namespace, request):
    """A fresh namespace with its own operator (gang scheduling off) watching only it."""
    op = operator(cluster, [namespace])
    request.addfinalizer(op.stop)
    op.start()
    return Env(cluster, namespace, op)
