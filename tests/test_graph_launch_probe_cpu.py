"""scripts/probes/graph_launch_probe.py on the CPU: its reading of a graph's shape (a pure function of the nodes, their
kinds and edges) on graphs built by hand, and bad arguments refused in one line (exit 2) before CuPy is imported.
The probe itself runs on the GPU."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

PROBE = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "probes" / "graph_launch_probe.py"
spec = importlib.util.spec_from_file_location("graph_launch_probe", PROBE)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

KERNEL, MEMSET, RECORD = 0, 2, 7


def shape(deps, kinds=None, programmatic=None):
    kinds = kinds or {}
    programmatic = programmatic or {}
    return probe.graph_shape(deps, lambda n: kinds.get(n, KERNEL), lambda n: deps[n],
                             lambda n: programmatic.get(n, 0))


def test_a_chain_of_kernels_is_a_straight_line():
    s = shape({"a": [], "b": ["a"], "c": ["b"]})
    assert s == {"nodes": 3, "kinds": {"kernel": 3}, "edges": 2, "programmatic_edges": 0, "roots": 1, "leaves": 1,
                 "joins": 0, "forks": 0, "straight_line": True}


@pytest.mark.parametrize("deps, kinds, programmatic, what", [
    ({"a": [], "b": ["a"], "m": ["b"], "c": ["m"]}, {"m": MEMSET}, {}, {"kinds": {"kernel": 3, "memset": 1}}),
    ({"a": [], "b": ["a"], "s": ["a"], "c": ["b", "s"]}, {}, {}, {"forks": 1, "joins": 1, "edges": 4}),
    ({"a": [], "b": [], "c": ["a", "b"]}, {}, {}, {"roots": 2, "joins": 1}),
    ({"a": [], "b": ["a"], "m": ["a"]}, {"m": MEMSET}, {}, {"leaves": 2, "forks": 1}),
    ({"a": [], "b": ["a"]}, {}, {"b": 1}, {"programmatic_edges": 1}),
    ({"a": [], "e": ["a"], "b": ["e"]}, {"e": RECORD}, {}, {"kinds": {"event record": 1, "kernel": 2}}),
])
def test_each_departure_from_a_straight_line_is_seen(deps, kinds, programmatic, what):
    s = shape(deps, kinds, programmatic)
    assert s["straight_line"] is False
    assert {k: s[k] for k in what} == what


def test_an_unknown_kind_is_named_by_its_number_and_an_edge_to_nowhere_refused():
    assert shape({"a": []}, {"a": 99})["kinds"] == {"type 99": 1}
    with pytest.raises(ValueError, match="node 'b' depends on 'x', not a node of the graph"):
        shape({"a": [], "b": ["x"]})
    assert shape({})["straight_line"] is False and shape({})["nodes"] == 0


def test_median_in_microseconds():
    assert probe.median_us([3e-6, 1e-6, 2e-6]) == 2.0


@pytest.mark.parametrize("args, said", [
    (["--model", "nope"], "--model: 'nope'; allowed: "),
    (["--launches", "2"], "--launches: 2; allowed: a whole number from 3"),
    (["--chain", "1"], "--chain: 1; allowed: a whole number from 2"),
    (["--dtype", "int8"], "--dtype: invalid choice: 'int8'"),
    (["--launches", "5", "--launches", "6"], "--launches: given twice (5, then 6); allowed: each option once"),
    (["--out", "/nonexistent-folder/x.jsonl"], "--out: '/nonexistent-folder/x.jsonl': its folder does not exist"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, said):
    r = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("graph_launch_probe: error: ") and said in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
