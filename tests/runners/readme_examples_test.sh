#!/usr/bin/env bash
# Every command example of the README is run, or listed below as not run with the reason (issue 16: "every example
# in --help and the README is run by a test"; the --help examples are runners.help_examples). The examples are the
# lines of its ```sh blocks, the `$ ` lines of its ```text blocks, its ```python blocks, and the commands of the
# studies table; the table of "The CLI" is synopses (SPEC.toml, DIR), whose runnable forms are the --help examples.
# An example the README gains or loses without a line here fails the test. The runnable ones run in a fresh
# directory with build/release/cli/wbaudit and examples/ linked in, and the output lines the README shows after
# each (but timings, paths with placeholders and lines the README elides) must appear in what it prints.
#   readme_examples_test.sh WBAUDIT SOURCE_DIR
set -euo pipefail
wbaudit=$(realpath "$1")
src=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_PROC_BIND=false
unset OMP_NUM_THREADS

# The examples and, for ```text blocks, the output the README shows after each: one JSON object a line.
/usr/bin/python3 - "$src/README.md" > "$work/examples.jsonl" <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read().split("\n")
out, block, lang = [], None, None
for line in lines:
    fence = re.match(r"^```(\w*)\s*$", line)
    if fence and block is None:
        block, lang = [], fence.group(1)
        continue
    if line.startswith("```") and block is not None:
        if lang == "sh":
            for l in block:
                cmd = re.sub(r"\s+#.*$", "", l).strip()
                if cmd:
                    out.append({"example": cmd, "shown": []})
        elif lang == "text":
            current = None
            for l in block:
                if l.startswith("$ "):
                    current = {"example": l[2:].strip(), "shown": []}
                    out.append(current)
                elif current is not None:
                    current["shown"].append(l)
        elif lang == "python":
            out.append({"example": "\n".join(block), "shown": [], "python": True})
        block = None
        continue
    if block is not None:
        block.append(line)
        continue
    # The studies table: | study | `command` ... |
    m = re.match(r"^\| [^|]+ \| `([^`]+)`", line)
    if m and (m.group(1).startswith("build/release/cli/wbaudit ") or m.group(1).startswith("examples/")):
        out.append({"example": m.group(1), "shown": []})
merged = {}
for e in out:  # the same command shown twice (the quick start and the worked example) is one, with all its output
    if e["example"] in merged:
        merged[e["example"]]["shown"] += e["shown"]
    else:
        merged[e["example"]] = e
for e in merged.values():
    print(json.dumps(e))
PY

# What this test does with each example: "run" or "not run: <reason>".
declare -A how=(
  ["scripts/main.sh"]="run its wbaudit steps (formats; run examples/two_layer_grid_quick.toml --out runs/two_layer_grid_quick --kokkos-threads=2); not its setup.sh (installs Debian packages and Kokkos) nor its build"
  ["scripts/test.sh"]="not run: it is this test suite (ctest), after the setup.sh that installs packages"
  ["build/release/cli/wbaudit evaluate runs/two_layer_grid_quick --analysis examples/two_layer_analysis.toml --check"]="run"
  ["python"]="run"
  ["build/release/cli/wbaudit run examples/two_layer_grid.toml"]="not run: the full-length study 1 grid (13 s unloaded); its quick reduction runs above, from the same code"
  ["build/release/cli/wbaudit run examples/decoder_matched.toml"]="not run: about 2 minutes of decoder training (study 2)"
  ["examples/study3.sh runs/study3"]="not run here: runners.study_scripts runs examples/study3.sh end to end at STUDY_STEPS=40"
  ["examples/study4.sh runs/study4"]="not run here: runners.study_scripts runs examples/study4.sh end to end at STUDY_STEPS=40"
  ["build/release/cli/wbaudit run examples/decoder_policy_contrast.toml"]="not run: about 2 minutes of decoder training (study 5)"
  ["build/release/cli/wbaudit run examples/decoder_replay_int3.toml"]="not run: 36 s of decoder training and replays (study 6)"
  ["examples/study7.sh runs/study7"]="not run here: runners.study7 runs examples/study7.sh end to end on a tiny decoder (20 steps, 2 seeds)"
  ["PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/train_gpt.py --out runs/pytorch"]="not run: 75 s of PyTorch training; tests/python run ReferenceRecorder, PersistentNative, audit, import and evaluate on smaller models"
)

d="$work/clone"
mkdir -p "$d/build/release/cli"
ln -s "$wbaudit" "$d/build/release/cli/wbaudit"
ln -s "$src/examples" "$d/examples"

# The README's shown output lines that a run must print: timings, the build's and setup's own lines, elisions and
# placeholders are left out; a line the README shortens with "(...)" must match up to there.
check_shown() {  # check_shown JSON OUTPUT
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, re, sys
e = json.loads(sys.argv[1])
printed = open(sys.argv[2]).read().split("\n")
missing = []
for line in e["shown"]:
    if not line.strip() or line.strip() == "..." or re.search(r"\b\d+(\.\d+)? ?s\b|\bin \d+s\b", line):
        continue
    if re.match(r"^(setup:|bootstrap-kokkos:|\[)", line):
        continue
    want = re.split(r"\(\.\.\.\)|<", line)[0].rstrip()
    if not any(p.rstrip().startswith(want) for p in printed):
        missing.append(line)
if missing:
    print("the README shows lines this run did not print:\n  " + "\n  ".join(missing))
    sys.exit(1)
PY
}

ran=0 skipped=0
while IFS= read -r json; do
  example=$(/usr/bin/python3 -c 'import json, sys; e = json.loads(sys.argv[1]); print("python" if e.get("python") else e["example"])' "$json")
  [ -n "${how[$example]+set}" ] || fail "README example without a line in this test (run it, or say why not): $example"
  what=${how[$example]}
  unset "how[$example]"
  if [[ "$what" == "not run"* ]]; then
    echo "${what%%:*}: $example (${what#*: })"
    skipped=$((skipped + 1))
    continue
  fi
  case "$example" in
    scripts/main.sh)
      (cd "$d" && build/release/cli/wbaudit formats &&
        build/release/cli/wbaudit run examples/two_layer_grid_quick.toml --out runs/two_layer_grid_quick \
          --kokkos-threads=2) > "$work/out" 2>&1 || { cat "$work/out"; fail "$example: its wbaudit steps failed"; }
      ;;
    python)
      /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])["example"])' "$json" > "$work/example.py"
      (cd "$d" && /usr/bin/python3 "$work/example.py") > "$work/out" 2>&1 \
        || { cat "$work/out"; fail "the README's Python example failed"; }
      ;;
    *)
      (cd "$d" && bash -c "$example") > "$work/out" 2>&1 < /dev/null || { cat "$work/out"; fail "failed: $example"; }
      ;;
  esac
  check_shown "$json" "$work/out" || fail "$example"
  [ -s "$work/out" ] || fail "printed nothing: $example"
  echo "ok: $example"
  ran=$((ran + 1))
done < "$work/examples.jsonl"
for gone in "${!how[@]}"; do fail "listed here but no longer in the README: $gone"; done
[ "$ran" -ge 3 ] || fail "only $ran examples ran"
echo "PASS ($ran README examples run, $skipped not run, each with its reason above)"
