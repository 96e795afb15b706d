"""The in-tree PEP 517 build backend of the wbaudit Python package (pyproject.toml): `pip install .` works offline.

It needs nothing but the standard library (``[build-system] requires = []``), so pip's isolated build environment
installs nothing. build_wheel drives CMake: it builds only the ``wbaudit_python`` target (the extension
``wbaudit/_core``, linked against the Kokkos that scripts/bootstrap-kokkos.sh put in ~/.cache/wbaudit and Debian's
HDF5) and packs a wheel with zipfile: the package's .py files, ``_core``, and METADATA / WHEEL / RECORD (sha256).

The build tree:
- ``WBAUDIT_BUILD_DIR=<an already built tree>`` (e.g. build/release after ``cmake --build --preset release``): its
  ``python/wbaudit/_core*.so`` is packed as it is, nothing is configured or built there.
- otherwise ``build/pip`` in the source tree (configured Release, without tests and benchmarks; later calls rebuild
  only what changed). ``WBAUDIT_BUILD_JOBS`` sets the build's parallelism (default: every core).

The extension keeps its build-tree RUNPATH (the Kokkos and HDF5 library directories), so the installed module finds
libkokkoscore without LD_LIBRARY_PATH, as ``cmake --install`` does (INSTALL_RPATH_USE_LINK_PATH).
"""
import base64
import glob
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "wbaudit"


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(wbaudit\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("wbaudit_build: no `project(wbaudit VERSION x.y.z` in CMakeLists.txt")
    return m.group(1)


def _summary():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r'DESCRIPTION\s+"([^"]*)"', f.read())
    return m.group(1) if m else "wbaudit"


def _tag():
    """cpXY-cpXY-<platform>: the extension is built for this interpreter's ABI."""
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{py}-{plat}"


def _run(cmd):
    """Runs CMake outside pip's isolation: pip's build environment sets PYTHONPATH (a sitecustomize that hides the
    system site-packages) and PYTHONNOUSERSITE, with which no interpreter imports numpy and CMake skips the module."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    print("wbaudit_build:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr, env=env)  # pip shows a failed build's output with -v


def _extension():
    """The path of the built wbaudit/_core extension (building it unless WBAUDIT_BUILD_DIR names a built tree)."""
    given = os.environ.get("WBAUDIT_BUILD_DIR")
    build = os.path.abspath(given) if given else os.path.join(ROOT, "build", "pip")
    if not given:
        # configured every time (quick when nothing changed): a configure that missed numpy or pybind11 retries
        _run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DWBAUDIT_BUILD_TESTS=OFF",
              "-DWBAUDIT_BUILD_BENCH=OFF", "-DWBAUDIT_BUILD_PYTHON=ON"])
        jobs = os.environ.get("WBAUDIT_BUILD_JOBS") or str(os.cpu_count() or 1)
        _run(["cmake", "--build", build, "--target", "wbaudit_python", "--parallel", jobs])
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = os.path.join(build, "python", NAME, "_core" + suffix)
    if not os.path.isfile(path):
        other = sorted(glob.glob(os.path.join(build, "python", NAME, "_core*.so")))
        raise RuntimeError(f"wbaudit_build: no python/{NAME}/_core{suffix} (for {sys.executable}) in {build}"
                           + (f"; found {other}: the module was built for another interpreter" if other else
                              " (WBAUDIT_BUILD_DIR must be an already built tree)" if given else
                              " (did CMake skip the Python module? see its configure output)"))
    return path


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\nSummary: {_summary()}\n"
            f"Requires-Python: >={sys.version_info.major}.{sys.version_info.minor}\nRequires-Dist: numpy\n")


def _wheel_file():
    return f"Wheel-Version: 1.0\nGenerator: wbaudit_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n"


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _dist_info():
    return f"{NAME}-{_version()}.dist-info"


# ---- PEP 517 hooks ------------------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(_wheel_file())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    ext = _extension()
    files = []  # (archive path, bytes)
    src = os.path.join(ROOT, "python", NAME)
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            with open(os.path.join(src, name), "rb") as f:
                files.append((f"{NAME}/{name}", f.read()))
    with open(ext, "rb") as f:
        files.append((f"{NAME}/{os.path.basename(ext)}", f.read()))
    info = _dist_info()
    files.append((f"{info}/METADATA", _metadata().encode()))
    files.append((f"{info}/WHEEL", _wheel_file().encode()))
    files.append((f"{info}/top_level.txt", f"{NAME}\n".encode()))
    record = [_record_line(p, data) for p, data in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = f"{NAME}-{_version()}-{_tag()}.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for p, data in files:
            zi = zipfile.ZipInfo(p, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o755 if p.endswith(".so") else 0o644) << 16
            z.writestr(zi, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    """The git-tracked files of the source tree as <name>-<version>.tar.gz (building from it needs CMake and Kokkos)."""
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
    base = f"{NAME}-{_version()}"
    sdist = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, sdist), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in sorted(p for p in out.decode().split("\0") if p):
            path = os.path.join(ROOT, rel)
            if os.path.isfile(path):
                t.add(path, arcname=f"{base}/{rel}", recursive=False)
        meta = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(meta)
        t.addfile(ti, io.BytesIO(meta))
    return sdist
