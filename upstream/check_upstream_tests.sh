#!/usr/bin/env bash
# Run TVM's own tests for the components each patch touches, without and with the patches.
#
#   upstream/check_upstream_tests.sh --source ~/tvm                 every patch, and the series
#   upstream/check_upstream_tests.sh --source ~/tvm --patch 0004-topi-clip-infinite-bound.patch
#
# Options:
#   --source DIR    TVM source checkout of the pinned release (upstream/tvm.pin: TVM_SOURCE_TAG,
#                   TVM_SOURCE_COMMIT); also taken from $TVM_SOURCE_DIR.  Only its tests/ are
#                   used, read-only: the tests run against the wheel, not against the checkout.
#   --python PY     interpreter whose apache-tvm wheel is tested (default: $PYTHON or python3);
#                   the wheel itself is never modified (scratch copies are patched)
#   --patch NAME    check only this patch of the series (repeatable)
#   --no-series     skip the comparison of the whole series against the pristine wheel
#   --work DIR      keep the scratch wheels and JUnit reports in DIR (default: temporary);
#                   a later run with the same DIR reuses the results of unchanged patches
#   --timeout SEC   per test file (default 3600); a file that times out counts as an error
#   -k EXPR         passed to pytest, to narrow a file that takes too long (say so when quoting)
#
# Patches are taken from the series upstream/apply.sh picks for the wheel's version; those
# that do not apply to a wheel (fixed upstream, C++ changes) are listed and skipped.  For
# patch k, its test files run on a scratch copy of the wheel with patches 1..k-1 applied
# ("before") and with 1..k applied ("after"); the union of all patches' test files runs on
# the pristine wheel and with the whole series.  A patch's test files are TVM's tests for
# each component it touches (COMPONENT_TESTS below) and the regression test the patch adds,
# run from a scratch tree next to the checkout's conftest.py files.  The report gives
# passed/failed/skipped/error counts per file before and after, and every test whose
# outcome changes.
#
# Exit status: 0 no test went from passed to failed, error or missing; 1 some did;
# 2 bad usage or setup.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APPLY_SH="$ROOT/upstream/apply.sh"

# Which of TVM's test files cover a file the patches touch: "<path prefix> <test globs...>",
# first match wins.  Globs that match nothing in the checkout are reported and skipped.
COMPONENT_TESTS=(
  "python/tvm/te/ tests/python/te/test_*.py tests/python/relax/test_blockbuilder_emit_te.py"
  "python/tvm/relax/block_builder.py tests/python/relax/test_blockbuilder_*.py tests/python/relax/test_transform_legalize_ops*.py"
  "python/tvm/relax/frontend/torch/ tests/python/relax/test_frontend_from_exported_program.py tests/python/relax/test_frontend_from_fx.py tests/python/relax/test_frontend_dynamo.py"
  "python/tvm/relax/transform/ tests/python/relax/test_backend_transform_shape_lower.py tests/python/relax/test_vm_build.py tests/python/relax/test_transform_bind_symbolic_vars.py"
  "python/tvm/topi/gpu/ tests/python/relax/test_backend_dispatch_sort_scan.py tests/python/relax/test_backend_dispatch_sampling.py"
  "python/tvm/s_tir/dlight/ tests/python/s_tir/dlight/test_gpu_*.py"
  "python/tvm/topi/ tests/python/topi/test_*.py tests/python/relax/test_transform_legalize_ops*.py tests/python/relax/test_fast_math_transform.py tests/python/relax/test_e2e_op_dynamic.py"
)

die() { echo "check_upstream_tests.sh: $*" >&2; exit 2; }
usage() { sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

source_dir="${TVM_SOURCE_DIR:-}"
python="${PYTHON:-python3}"
only=()
series_run=1
work=""
timeout_s=3600
kexpr=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --source) [[ $# -ge 2 ]] || die "--source needs a directory"; source_dir="$2"; shift 2 ;;
    --source=*) source_dir="${1#*=}"; shift ;;
    --python) [[ $# -ge 2 ]] || die "--python needs an interpreter"; python="$2"; shift 2 ;;
    --patch) [[ $# -ge 2 ]] || die "--patch needs a patch name"; only+=("$(basename "$2")"); shift 2 ;;
    --no-series) series_run=0; shift ;;
    --work) [[ $# -ge 2 ]] || die "--work needs a directory"; work="$2"; shift 2 ;;
    --timeout) [[ $# -ge 2 ]] || die "--timeout needs seconds"; timeout_s="$2"; shift 2 ;;
    -k) [[ $# -ge 2 ]] || die "-k needs an expression"; kexpr=(-k "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[[ -n "$source_dir" ]] || die "no TVM checkout: pass --source DIR or set TVM_SOURCE_DIR (see upstream/tvm.pin)"
[[ -d "$source_dir/tests/python" ]] || die "'$source_dir' is not a TVM source checkout (no tests/python)"
source_dir="$(cd "$source_dir" && pwd)"
command -v "$python" >/dev/null || die "no Python interpreter '$python'; pass --python"
"$python" -c "import pytest" 2>/dev/null || die "'$python' has no pytest"

# --- the checkout should be the pinned release: say what it is ---------------------------
pin_tag="$(sed -n 's/^TVM_SOURCE_TAG=//p' "$ROOT/upstream/tvm.pin")"
pin_commit="$(sed -n 's/^TVM_SOURCE_COMMIT=//p' "$ROOT/upstream/tvm.pin")"
head="$(git -C "$source_dir" rev-parse HEAD 2>/dev/null || echo unknown)"
tag="$(git -C "$source_dir" describe --tags --exact-match HEAD 2>/dev/null || true)"
echo "TVM tests from $source_dir (commit ${head:0:12}${tag:+, $tag})"
if [[ "$tag" != "$pin_tag" && "$head" != "$pin_commit"* ]]; then
  echo "WARNING: the checkout is not $pin_tag ($pin_commit), the release of the wheel; test files" \
    "may not match the wheel, so some tests can fail before and after alike" >&2
fi

if [[ -n "$work" ]]; then
  mkdir -p "$work"
  work="$(cd "$work" && pwd)"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi

# --- scratch copies of the wheel -------------------------------------------------------
# copy_wheel SITE: the wheel's Python files copied (they get patched), the rest symlinked,
# and an interpreter SITE-python that imports this copy first.
copy_wheel() {
  local site="$1"
  rm -rf "$site" "$site-python"
  "$python" - "$site" <<'PY'
import importlib.metadata, importlib.util, os, shutil, sys
from pathlib import Path
site = Path(sys.argv[1])
src = Path(list(importlib.util.find_spec("tvm").submodule_search_locations)[0])
for root, dirs, files in os.walk(src):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    out = site / "tvm" / Path(root).relative_to(src)
    out.mkdir(parents=True, exist_ok=True)
    for name in files:
        if name.endswith(".py"):
            shutil.copy2(Path(root) / name, out / name)
        else:
            (out / name).symlink_to(Path(root) / name)
version = importlib.metadata.version("apache-tvm")
dist = site / f"apache_tvm-{version}.dist-info"
dist.mkdir()
(dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: apache-tvm\nVersion: {version}\n")
PY
  printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' \
    "$site" "$(command -v "$python")" >"$site-python"
  chmod +x "$site-python"
}

# The pristine wheel (state 0): a copy with every patch of the series reverted.
mkdir -p "$work/wheels"
copy_wheel "$work/wheels/state-0"
"$APPLY_SH" --revert --python "$work/wheels/state-0-python" >"$work/wheels/state-0.log" 2>&1 ||
  { cat "$work/wheels/state-0.log" >&2; die "could not revert the series on a copy of the wheel"; }
check="$("$APPLY_SH" --check --python "$work/wheels/state-0-python" 2>&1 || true)"
series="$(sed -n 's/.*, series \(.*\)$/\1/p' <<<"$check" | head -n1)"
[[ -n "$series" ]] || { echo "$check" >&2; die "apply.sh found no series for this wheel"; }
series_dir="$(dirname "$ROOT/$series")"
echo "$(head -n1 <<<"$check")"
patches=()
while read -r line; do
  p="${line##* }"
  state="$(sed 's/ *[^ ]*$//' <<<"$line")"
  if [[ "$state" == "not applied" ]]; then patches+=("$p"); else echo "  skipped ($state): $p"; fi
done < <(sed -n 's/^  //p' <<<"$check")
[[ ${#patches[@]} -gt 0 ]] || die "no patch of $series applies to this wheel"
for p in "${only[@]}"; do
  printf '%s\n' "${patches[@]}" | grep -qx "$p" || die "$p is not a pending patch of $series"
done
# State k (patches 1..k applied) is named by a hash of those patches' diffs, so that the
# results kept in --work are reused only while the patches stay the same.
sid=(0)
for ((i = 1; i <= ${#patches[@]}; i++)); do
  sid[i]="$i-$(for ((j = 0; j < i; j++)); do sed -n '/^---$/,$p' "$series_dir/${patches[j]}"; done |
    sha1sum | cut -c1-10)"
done

# State k: the pristine copy with the first k patches applied, by apply.sh from a scratch
# project whose series lists just those.
make_state() {
  local k="$1" site="$work/wheels/state-${sid[$1]}" proj="$work/wheels/project-${sid[$1]}" i
  [[ -x "$site-python" ]] && return 0
  copy_wheel "$site"
  "$APPLY_SH" --revert --python "$site-python" >/dev/null 2>&1 || die "revert failed for state $k"
  rm -rf "$proj"
  mkdir -p "$proj/upstream" "$proj/tvm_patches"
  cp "$APPLY_SH" "$proj/upstream/apply.sh"
  sed -n '/^# versions:/p' "$ROOT/$series" >"$proj/tvm_patches/series"
  for ((i = 0; i < k; i++)); do
    cp "$series_dir/${patches[i]}" "$proj/tvm_patches/"
    echo "$(basename "${patches[i]}")" >>"$proj/tvm_patches/series"
  done
  "$proj/upstream/apply.sh" --python "$site-python" >"$site.log" 2>&1 ||
    { cat "$site.log" >&2; die "could not apply the first $k patch(es) to a copy of the wheel"; }
}

# --- the test files of each patch ------------------------------------------------------
patch_files() { sed -n 's|^diff --git a/\(.*\) b/.*|\1|p' "$1"; }
declare -A files_of  # patch -> test files (checkout-relative, or regress/<patch>/...)
declare -A missing
for p in "${patches[@]}"; do
  tests=()
  while read -r f; do
    [[ "$f" == tests/* ]] && continue
    entry=""
    for e in "${COMPONENT_TESTS[@]}"; do
      [[ "$f" == "${e%% *}"* ]] && { entry="$e"; break; }
    done
    [[ -n "$entry" ]] || die "no TVM tests are listed for $f (patch $p): add it to COMPONENT_TESTS"
    for g in ${entry#* }; do
      matched=0
      for t in $(cd "$source_dir" && compgen -G "$g" | sort); do tests+=("$t"); matched=1; done
      [[ $matched -eq 1 ]] || missing[$g]=1
    done
  done < <(patch_files "$series_dir/$p")
  # The regression test the patch adds, in a scratch tree with the checkout's conftest.py
  # files on its path.
  reg="$work/regress/${p%.patch}"
  rm -rf "$reg"
  mkdir -p "$reg"
  (cd "$reg" && GIT_CEILING_DIRECTORIES="$work" git apply --include='tests/*' "$series_dir/$p")
  while read -r t; do
    d="$(dirname "$t")"
    while [[ "$d" == tests* ]]; do
      [[ -f "$source_dir/$d/conftest.py" && ! -f "$reg/$d/conftest.py" ]] &&
        cp "$source_dir/$d/conftest.py" "$reg/$d/conftest.py"
      d="$(dirname "$d")"
    done
    tests+=("regress/${p%.patch}/$t")
  done < <(cd "$reg" && find tests -name 'test_*.py' | sort)
  files_of[$p]="$(printf '%s\n' "${tests[@]}" | awk '!seen[$0]++')"
done
for g in "${!missing[@]}"; do echo "  (no $g in this checkout)"; done

# --- running a test file in a state (each at most once) -----------------------------------
run_file() {  # STATE FILE: runs it unless done already; sets $xml to its JUnit report
  local k="$1" f="$2" cwd rel
  xml="$work/junit/state-${sid[k]}/${f//\//__}.xml"
  if [[ ! -f "$xml" ]]; then
    make_state "$k"
    mkdir -p "$(dirname "$xml")"
    if [[ "$f" == regress/* ]]; then
      cwd="$work/regress/$(cut -d/ -f2 <<<"$f")"
      rel="${f#regress/*/}"
    else
      cwd="$source_dir"
      rel="$f"
    fi
    local where
    where="$(cd "$cwd" && "$work/wheels/state-${sid[k]}-python" -c 'import tvm; print(tvm.__file__)')"
    [[ "$where" == "$work/wheels/state-${sid[k]}/"* ]] || die "tests would import TVM from $where"
    echo "  running $f on state $k" >&2
    local start=$SECONDS rc=0
    (cd "$cwd" && PYTHONDONTWRITEBYTECODE=1 timeout "$timeout_s" "$work/wheels/state-${sid[k]}-python" \
      -m pytest -q -p no:cacheprovider -o addopts= "${kexpr[@]}" --junitxml="$xml.part" "$rel" \
      </dev/null >"$xml.log" 2>&1) || rc=$?
    [[ $rc -eq 124 ]] && echo "TIMEOUT after ${timeout_s}s" >>"$xml.log"
    [[ -f "$xml.part" ]] || echo '<testsuites/>' >"$xml.part"
    echo "$rc $((SECONDS - start))" >"$xml.rc"
    mv "$xml.part" "$xml"
  fi
}

# compare LABEL BEFORE-STATE AFTER-STATE FILES...: report and record regressions.
regressions=0
compare() {
  local label="$1" b="$2" a="$3"
  shift 3
  local args=()
  for f in "$@"; do
    args+=("$f")
    run_file "$b" "$f"
    args+=("$xml")
    run_file "$a" "$f"
    args+=("$xml")
  done
  echo
  echo "== $label"
  "$python" - "${args[@]}" <<'PY' || regressions=$((regressions + 1))
import sys
import xml.etree.ElementTree as ET

def outcomes(path):
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname", "") + "::" + case.get("name", "")
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            result[name] = "failed"
        elif "error" in kinds:
            result[name] = "error"
        elif "skipped" in kinds:
            result[name] = "skipped"
        else:
            result[name] = "passed"
    rc, secs = open(path + ".rc").read().split()
    if rc not in ("0", "1", "5") and not result:
        result["<file>"] = "error"  # collection failed, crashed or timed out
    return result, int(secs)

KINDS = ("passed", "failed", "skipped", "error")

def counts(res):
    return "/".join(str(sum(v == k for v in res.values())) for k in KINDS)

def words(res):
    n = {k: sum(v == k for v in res.values()) for k in KINDS}
    return ", ".join(f"{n[k]} {k}" for k in KINDS if n[k] or k == "passed")

args = sys.argv[1:]
bad = 0
labels = {}
for i in range(0, len(args), 3):
    name = args[i]
    if name.startswith("regress/"):
        name = name.split("/", 2)[2] + " (added by the patch)"
    labels[i] = name
width = max(len(n) for n in labels.values())
print(f"  {'file':<{width}}   passed/failed/skipped/error before -> after   (seconds)")
changed = []
tested = []
for i in range(0, len(args), 3):
    name, before, after = labels[i], args[i + 1], args[i + 2]
    (b, tb), (a, ta) = outcomes(before), outcomes(after)
    print(f"  {name:<{width}} {counts(b):>16} -> {counts(a):<24} ({tb}, {ta})")
    short = name.replace(" (added by the patch)", " (new)")
    if words(b) == words(a):
        tested.append(f"  {short}: {words(a)} before and after")
    else:
        tested.append(f"  {short}: {words(b)} before; {words(a)} after")
    for test in sorted(set(b) | set(a)):
        ob, oa = b.get(test, "missing"), a.get(test, "missing")
        if ob != oa:
            changed.append(f"    {ob:>7} -> {oa:<7} {test}")
            bad += ob == "passed"
if changed:
    print("  tests whose outcome changes:")
    print("\n".join(changed))
else:
    print("  no test changes outcome")
print("  for the patch description:")
print("\n".join("  " + line for line in tested))
sys.exit(1 if bad else 0)
PY
}

n=${#patches[@]}
for ((k = 1; k <= n; k++)); do
  p="${patches[k - 1]}"
  if [[ ${#only[@]} -gt 0 ]] && ! printf '%s\n' "${only[@]}" | grep -qx "$p"; then continue; fi
  mapfile -t fs <<<"${files_of[$p]}"
  before="patches 1..$((k - 1))"
  [[ $k -gt 1 ]] || before="pristine"
  compare "$p: before ($before) -> after (patches 1..$k)" $((k - 1)) "$k" "${fs[@]}"
done
if [[ $series_run -eq 1 && ${#only[@]} -eq 0 ]]; then
  mapfile -t fs < <(for p in "${patches[@]}"; do echo "${files_of[$p]}"; done | awk '!seen[$0]++')
  compare "the whole series: pristine wheel -> all $n patches" 0 "$n" "${fs[@]}"
fi
echo
if [[ $regressions -gt 0 ]]; then
  echo "FAILED: tests went from passed to failed, error or missing (see above)"
  exit 1
fi
echo "OK: no test went from passed to failed"
