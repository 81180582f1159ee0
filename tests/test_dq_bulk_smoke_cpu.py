"""scripts/probes/dq_bulk_smoke.py's verdict, on the CPU (the probe itself needs a GPU: scripts/bulk_call.sh runs it
first): the bulk form may go on only where dk and dv are the default's bits and dq is finite and near the default's."""
from pathlib import Path

import pytest

from conftest import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "probes" / "dq_bulk_smoke.py"


@pytest.fixture(scope="module")
def smoke():
    return load_script(SCRIPT, "dq_bulk_smoke_under_test")


def test_the_form_goes_on_with_the_default_dkdv_bits_and_a_near_dq(smoke):
    assert smoke.verdict(True, 3e-3, True) == (True, "dk and dv the default's bits, dq within the bound")
    assert smoke.verdict(True, 0.0, True)[0]


@pytest.mark.parametrize("same, rel, finite, why", [
    (True, 0.5, True, "dq lies 5.00e-01 from the default's (bound 1e-02)"),
    (True, float("nan"), True, "dq lies nan from the default's (bound 1e-02)"),   # a nan must not pass the bound
    (False, 1e-4, True, "dk and dv are not the default's bits"),
    (True, 1e-4, False, "dq holds non-finite values"),
])
def test_the_form_stops_otherwise_naming_why(smoke, same, rel, finite, why):
    assert smoke.verdict(same, rel, finite) == (False, why)
