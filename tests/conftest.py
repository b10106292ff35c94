import pytest

from backends import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The compile target a numerical test runs on."""
    return request.param
