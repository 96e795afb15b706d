"""Distributed recordings (wbaudit.distributed) with 2 gloo processes on loopback (a FileStore, no network): a sharded
recording (each rank holds half of each flattened parameter) merges into ONE trace whose every count, ratio histogram
and margin histogram equals a one-process recording of the same run, and a sharded PersistentNative keys SR by the
global coordinate (its final weights equal the one-process run's bit for bit); a replicated (DDP) recording is written
by rank 0 alone and equals the one-process trace; a rank whose weights differ raises an error naming the parameter,
the rank and the step; shards with a gap or an overlap are refused before anything is written; a rank that stops
early leaves only trace.h5.partial. The runs themselves are deterministic (dist_worker.py)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import wbaudit
import dist_worker

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")


def launch(scenario, out, world=2):
    """Runs the ranks as subprocesses (gloo on loopback, a FileStore in out); returns each rank's error (or None)."""
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    store = os.path.join(out, "store")
    procs = [subprocess.Popen([sys.executable, WORKER, scenario, str(r), str(world), store, str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = [p.communicate(timeout=300)[0] for p in procs]  # a hang guard only: the runs take seconds
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{logs[r]}"
    errors = []
    for r in range(world):
        with open(os.path.join(out, f"result{r}.json")) as f:
            errors.append(json.load(f)["error"])
    return errors


def assert_same(a, b, where="trace"):
    """Deep equality of two trace dicts' values (NaN == NaN), dict keys included."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (np.ndarray, list, tuple)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
    elif isinstance(a, float):
        assert (a == b) or (np.isnan(a) and np.isnan(b)), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_wrote_nothing(d):
    """Rank 1 was given its own path: it writes no file there (the recorder may have created the directory)."""
    assert not [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs]


def assert_traces_equal(dist_trace, single_trace):
    assert list(dist_trace["recorded_steps"]) == list(single_trace["recorded_steps"])
    for key in ("mode", "format", "policy", "seed", "steps", "loss", "learning_rate"):
        assert_same(dist_trace[key], single_trace[key], key)
    assert_same(dist_trace["groups"], single_trace["groups"], "groups")
    config = json.loads(dist_trace["config_json"])
    assert config["parameters"] == {n: list(s) for n, s in dist_worker.SHAPES.items()}


@pytest.fixture(scope="module")
def single_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("single")
    torch.set_num_threads(1)
    dist_worker.single("reference", str(d / "ref.h5"))
    weights = dist_worker.single("target", str(d / "target.h5"))
    return {"reference": wbaudit.read_trace(str(d / "ref.h5")), "target": wbaudit.read_trace(str(d / "target.h5")),
            "weights": weights}


def test_sharded_reference_merges_into_the_one_process_trace(tmp_path, single_runs):
    errors = launch("sharded", tmp_path)
    assert errors == [None, None]
    trace = wbaudit.read_trace(str(tmp_path / "trace.h5"))
    single = single_runs["reference"]
    # the groups hold what the merge must add and gather: margins, ratio histograms, a small group's joint w/u
    assert "w" in single["groups"]["small"]["joint"] and "w" not in single["groups"]["big"]["joint"]
    assert single["groups"]["odd"]["joint"]["init_absmax"] == 4.0 and "int4" in single["groups"]["odd"]["projected"]
    assert int(np.asarray(single["groups"]["big"]["joint"]["margin"]).sum()) > 0
    assert_traces_equal(trace, single)
    assert_wrote_nothing(tmp_path / "rank1")


def test_sharded_persistent_native_keys_sr_by_the_global_coordinate(tmp_path, single_runs):
    errors = launch("target_sharded", tmp_path)
    assert errors == [None, None]
    assert_traces_equal(wbaudit.read_trace(str(tmp_path / "trace.h5")), single_runs["target"])
    halves = dist_worker.halves(2)
    for r in range(2):
        local = np.load(tmp_path / f"weights{r}.npz")
        for name, (off, k) in halves[r].items():
            whole = single_runs["weights"][name].reshape(-1)
            np.testing.assert_array_equal(local[name], whole[off:off + k], err_msg=f"rank {r} {name}")
    erased = sum(int(np.sum(g["erased"])) for g in single_runs["target"]["groups"].values())
    applied = sum(int(np.sum(g["applied"])) for g in single_runs["target"]["groups"].values())
    assert erased > 0 and applied > 0  # the run exercises both outcomes of SR


@pytest.mark.parametrize("kind", ["reference", "target"])
def test_replicated_is_written_by_rank_0_and_equals_the_one_process_trace(tmp_path, single_runs, kind):
    errors = launch("replicated" if kind == "reference" else "target_replicated", tmp_path)
    assert errors == [None, None]
    assert_traces_equal(wbaudit.read_trace(str(tmp_path / "trace.h5")), single_runs[kind])
    assert_wrote_nothing(tmp_path / "rank1")


def test_replicated_rank_with_other_weights_is_named(tmp_path):
    errors = launch("replicated_perturb", tmp_path)  # rank 1 nudges odd[0] before step 3
    for e in errors:
        assert e is not None and "DistributedMismatch" in e
        assert "parameter odd" in e and "rank 1" in e and "step 3" in e and "weights" in e, e
    assert not os.path.exists(tmp_path / "trace.h5")
    partial = wbaudit.read_trace(str(tmp_path / "trace.h5.partial"), True)
    assert list(partial["recorded_steps"]) == [0, 1, 2]  # the disagreeing step was not written


@pytest.mark.parametrize("scenario,words", [("sharded_gap", "(a gap)"), ("sharded_overlap", "(an overlap)")])
def test_shards_must_tile_each_parameter(tmp_path, scenario, words):
    errors = launch(scenario, tmp_path)
    for e in errors:
        assert e is not None and e.startswith("ValueError") and "parameter odd" in e and words in e, e
    assert not [f for f in os.listdir(tmp_path) if f.startswith("trace") or f.startswith("rank")]


def test_a_rank_that_stops_early_leaves_only_the_partial(tmp_path):
    errors = launch("sharded_short", tmp_path)  # rank 0 runs 5 steps, rank 1 three; both record steps 0..2
    for e in errors:
        assert e is not None and "DistributedMismatch" in e and "between 3 and 5 steps" in e, e
    assert not os.path.exists(tmp_path / "trace.h5")
    partial = wbaudit.read_trace(str(tmp_path / "trace.h5.partial"), True)
    assert list(partial["recorded_steps"]) == [0, 1, 2]
