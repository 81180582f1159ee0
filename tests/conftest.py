"""Fixtures shared by the test files."""
import pytest


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for the in-process work: the tiny model gains nothing from more, and on a loaded
    2-core machine torch's OpenMP pool spinning against other processes makes it many times slower."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
