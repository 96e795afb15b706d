"""`wbaudit import`: a trace from wbaudit.torch becomes an external, non-canonical run with its provenance; nothing
is overwritten, and a bad trace leaves the directory as it was."""
import json
import os
import subprocess

import torch

import wbaudit
from wbaudit.torch import PersistentNative


def make_trace(path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    pn = PersistentNative(torch.optim.SGD(model.parameters(), lr=0.1), formats="e4m3", model=model, path=path)
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        pn.zero_grad()
        loss.backward()
        pn.step(loss=loss.item())
    return pn.close()


def test_import_records_provenance_and_is_never_canonical(tmp_path, wbaudit_exe):
    trace = make_trace(str(tmp_path / "run" / "trace.h5"))
    sweep = tmp_path / "sweep"
    r = subprocess.run([wbaudit_exe, "import", str(sweep), trace, "--name", "e4m3-run"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = json.loads((sweep / "external" / "e4m3-run" / "manifest.json").read_text())
    assert m["schema"] == "wbaudit.external/1" and m["canonical"] is False
    assert m["role"] == "target" and m["format"] == "e4m3" and m["groups"] == ["weight", "bias"]
    p = m["provenance"]
    assert p["torch_version"] == torch.__version__ and len(p["script_sha256"]) == 64 and p["host"]
    assert "not produced by wbaudit's runner" in m["noncanonical_reason"]
    assert wbaudit.read_trace(str(sweep / "external" / "e4m3-run" / "trace.h5"))["groups"]["weight"]["size"] == 8
    # the same name again: refused, the first import untouched
    before = (sweep / "external" / "e4m3-run" / "manifest.json").read_text()
    r = subprocess.run([wbaudit_exe, "import", str(sweep), trace, "--name", "e4m3-run"], capture_output=True, text=True)
    assert r.returncode == 1 and "already exists" in r.stderr
    assert (sweep / "external" / "e4m3-run" / "manifest.json").read_text() == before
    # an edited trace is reported as broken by --list
    with open(sweep / "external" / "e4m3-run" / "trace.h5", "ab") as f:
        f.write(b"x")
    r = subprocess.run([wbaudit_exe, "import", str(sweep), "--list"], capture_output=True, text=True)
    assert "BROKEN: trace.h5 changed since the import" in r.stdout


def test_bad_trace_imports_nothing(tmp_path, wbaudit_exe):
    good = make_trace(str(tmp_path / "good.h5"))
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5")
    sweep = tmp_path / "sweep"
    r = subprocess.run([wbaudit_exe, "import", str(sweep), good, str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "bad.h5" in r.stderr
    assert not os.path.exists(sweep / "external") or os.listdir(sweep / "external") == []


SPEC = """seed = 7
steps = 400
[sweep]
name = "import-rules"
[model]
kind = "two_layer"
input_dim = 8
hidden = 16
output_dim = 2
activation = "tanh"
[data]
batch = 16
[optimizer]
kind = "adam"
[schedule]
kind = "constant"
[record]
kind = "every_k"
k = 4
[target]
policy = "nearest"
[grid]
"target.format" = ["bf16", "e4m3", "e5m2", "fp16"]
[evaluation]
groups = ["layer1.weight", "layer2.weight"]
threshold = 0.5
"""


def test_import_report_applies_the_sweep_reports_crossing_rules(tmp_path, wbaudit_exe):
    """Issue 31 item 5: the same runs imported give the sweep report's crossing headline (burn-in 0.5% of the run,
    groups below 64 coordinates left out); before, import --report counted crossings at the first recorded step and
    every group (here 7/16 both cross, span 253x, against the report's 1/4, 1x)."""
    (tmp_path / "spec.toml").write_text(SPEC)
    sweep = tmp_path / "sweep"
    r = subprocess.run([wbaudit_exe, "run", str(tmp_path / "spec.toml"), "--out", str(sweep), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([wbaudit_exe, "report", str(sweep)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sweep_line = next(line for line in r.stdout.splitlines() if line.startswith("crossings: "))
    traces = sorted(str(p) for p in sweep.glob("cells/*/attempts/*/trace.h5"))
    assert len(traces) == 5  # one fp32 reference, four targets
    names = [a for i in range(len(traces)) for a in ("--name", f"run{i}")]

    def imported(*extra):
        out = tmp_path / f"ext{len(extra)}"
        res = subprocess.run([wbaudit_exe, "import", str(out), *traces, *names, "--report", *extra],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        return res.stdout

    text = imported()
    line = next(x for x in text.splitlines() if x.startswith("crossings: "))
    # import --report scores every group (biases too), the report only [evaluation] groups, which are the groups of at
    # least 64 coordinates here: the headline up to the count of small groups left out is the same.
    assert line.split("; ")[:-1] == sweep_line.split("; ")[:-1], (line, sweep_line)
    assert "burn-in t0 = 2 (default: 0.5%" in text and "fewer than 64 coordinates" in text
    # and the rules matter on these runs: without them the headline differs
    bare = next(x for x in imported("--burn-in", "0", "--min-group-size", "0").splitlines()
                if x.startswith("crossings: "))
    assert bare.split("; ")[0] != sweep_line.split("; ")[0]
