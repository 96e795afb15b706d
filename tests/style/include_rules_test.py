#!/usr/bin/python3
"""The dependency rules of docs/architecture.md, checked on the #include lines of every source file.

Folders (modules and runners' rooms) and what each may include besides itself:
  util                nothing (std, OpenSSL, HDF5, nlohmann-json)
  stats               nothing
  sim                 util
  forecast            sim, stats, util
  audit               sim, util
  runners/spec        sim, forecast, stats, util
  runners/store       runners/spec, sim, util
  runners/exec        runners/store, runners/spec, sim, forecast, stats, util   (never evaluate/ or report/)
  runners/report      sim, stats, forecast, util                                  (never store/)
  runners/evaluate    runners/store, runners/spec, runners/report, sim, forecast, stats, util
  cli                 everything above
Also: no cycle between folders, and cli/ headers are not installed (cmake/WbauditInstall.cmake).
Exit status 1 with every violation listed, 0 when the rules hold.

Usage: include_rules_test.py SOURCE_DIR
"""
import os
import re
import sys

ALLOWED = {
    "util": set(),
    "stats": set(),
    "sim": {"util"},
    "forecast": {"sim", "stats", "util"},
    "audit": {"sim", "util"},
    "runners/spec": {"sim", "forecast", "stats", "util"},
    "runners/store": {"runners/spec", "sim", "util"},
    "runners/exec": {"runners/store", "runners/spec", "sim", "forecast", "stats", "util"},
    "runners/report": {"sim", "stats", "forecast", "util"},
    "runners/evaluate": {"runners/store", "runners/spec", "runners/report", "sim", "forecast", "stats", "util"},
    "cli": {"runners/spec", "runners/store", "runners/exec", "runners/report", "runners/evaluate", "audit", "sim",
            "forecast", "stats", "util"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """The folder (as in ALLOWED) a repository path belongs to, or None."""
    parts = path.split("/")
    if parts[0] == "runners" and len(parts) > 2:
        return "runners/" + parts[1]
    return parts[0] if parts[0] in ALLOWED else None


def main():
    root = sys.argv[1]
    problems = []
    edges = {}
    for top in ["util", "stats", "sim", "forecast", "audit", "runners", "cli"]:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                source = folder_of(path)
                if source is None:
                    problems.append(f"{path}: not in any folder of the layout")
                    continue
                text = open(os.path.join(root, path), encoding="utf-8").read()
                for included in INCLUDE.findall(text):
                    target = folder_of(included)
                    if target is None or target == source:
                        continue
                    edges.setdefault(source, set()).add(target)
                    if target not in ALLOWED[source]:
                        problems.append(f"{path}: includes {included} ({source} may not depend on {target})")
    # No cycle between folders (the graph of actual includes).
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                problems.append("cycle between folders: " + " -> ".join(stack + [node, nxt]))
            elif nxt not in state:
                visit(nxt, stack + [node])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    install = open(os.path.join(root, "cmake", "WbauditInstall.cmake"), encoding="utf-8").read()
    if re.search(r"foreach\(module[^)]*\bcli\b", install) or "/cli/" in install:
        problems.append("cmake/WbauditInstall.cmake installs cli/ headers")
    for p in problems:
        print("RULE:", p)
    print(f"include rules: {sum(len(v) for v in edges.values())} folder dependencies checked, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
