import os
import shutil

import pytest


@pytest.fixture(scope="session")
def wbaudit_exe():
    exe = os.environ.get("WBAUDIT_EXE") or shutil.which("wbaudit")
    if not exe:
        pytest.fail("WBAUDIT_EXE is not set (ctest sets it to the built wbaudit)")
    return exe
