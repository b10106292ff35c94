import pytest

from backends import BACKENDS
from cinnlite.runtime import cache as caches


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The compile target a numerical test runs on."""
    return request.param


def pytest_addoption(parser):
    """Options of the randomized differential test (tests/test_fuzz.py)."""
    group = parser.getgroup("cinnlite fuzz")
    group.addoption("--fuzz-draws", type=int, default=None,
                    help="programs the randomized differential test draws per backend "
                         "(default: CINNLITE_FUZZ_DRAWS, else a fixed number: the same draws on every machine)")
    group.addoption("--fuzz-seconds", type=float, default=None,
                    help="soak run: keep drawing until this many seconds per backend are spent "
                         "(default: CINNLITE_FUZZ_SECONDS, else off)")
    group.addoption("--fuzz-seed", type=int, default=None,
                    help="seed of the randomized differential test (default: CINNLITE_FUZZ_SEED, else fixed)")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A disk compile cache of this test's own, and an empty memory cache before and after."""
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(tmp_path / "cache"))
    caches.MEMORY.clear()
    yield tmp_path / "cache"
    caches.MEMORY.clear()
