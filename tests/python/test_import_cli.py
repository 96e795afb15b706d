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
