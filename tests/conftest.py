import pytest

from backends import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The compile target a numerical test runs on."""
    return request.param


def pytest_addoption(parser):
    """Options of the randomized differential test (tests/test_fuzz.py)."""
    group = parser.getgroup("cinnlite fuzz")
    group.addoption("--fuzz-seconds", type=float, default=None,
                    help="seconds the randomized differential test runs per backend "
                         "(default: CINNLITE_FUZZ_SECONDS, else about 24 s shared by the backends)")
    group.addoption("--fuzz-seed", type=int, default=None,
                    help="seed of the randomized differential test (default: CINNLITE_FUZZ_SEED, else fixed)")
