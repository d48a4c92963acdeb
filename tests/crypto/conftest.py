"""Fixtures shared by the CKKS tests."""
import pytest

from tests.crypto.ckks_helpers import context


@pytest.fixture(scope="module")
def ctx():
    """The TOY context with the shared rotation keys (one keygen per session, see :func:`context`)."""
    return context("TOY")
