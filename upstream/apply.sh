#!/usr/bin/env bash
# Apply the kokoro-tvm-ext patch series to TVM.
#
#   upstream/apply.sh                  patch the apache-tvm wheel of the active Python
#   upstream/apply.sh --source DIR     patch a TVM source checkout (all patches)
#   upstream/apply.sh --check          report the state of each patch, write nothing
#   upstream/apply.sh --revert         undo the patches this script applied
#
# Options:
#   --source DIR        TVM source checkout; also taken from $TVM_SOURCE_DIR
#   --python PY         interpreter whose apache-tvm wheel is patched (default: $PYTHON or python3)
#   --tvm-version V     version of a source checkout that has no release tag
#
# The series is chosen by the TVM version: tvm_patches/series for the pinned release
# (upstream/tvm.pin), tvm_patches/backports/*/series for older trees; each series names
# its versions in a "# versions:" line.  In wheel mode only Python-side patches apply
# (paths python/tvm/... map to the installed tvm/ package); patches touching C++ are
# reported as needing a source build.
#
# Every patch is first checked on a scratch copy of the files it touches, in series
# order; the target is written only when all of them succeed, so a failing patch never
# leaves a half-applied tree.  Running it again reports "already applied" and writes
# nothing.  A patch whose "Applied-Upstream: vX.Y.Z, ..." header names a release at or
# below the target's version is reported as fixed upstream and skipped.  A target that
# carries an older version of a patch (one committed earlier in this repository's git
# history) is updated: that version is reverted and the current one applied.
#
# Exit status: 0 done (with --check: nothing left to apply), 1 a patch does not apply
# (with --check: patches are pending), 2 bad usage or unsupported TVM version.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PATCH_DIR="$ROOT/tvm_patches"

die() { echo "apply.sh: $*" >&2; exit "${EXIT_CODE:-2}"; }
usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

mode=apply
source_dir="${TVM_SOURCE_DIR:-}"
python="${PYTHON:-python3}"
tvm_version=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --source) [[ $# -ge 2 ]] || die "--source needs a directory"; source_dir="$2"; shift 2 ;;
    --source=*) source_dir="${1#*=}"; shift ;;
    --python) [[ $# -ge 2 ]] || die "--python needs an interpreter"; python="$2"; shift 2 ;;
    --tvm-version) [[ $# -ge 2 ]] || die "--tvm-version needs a version"; tvm_version="$2"; shift 2 ;;
    --check) mode=check; shift ;;
    --revert) mode=revert; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# --- the target: where the files are, which version, how patch paths map onto it ------
if [[ -n "$source_dir" ]]; then
  [[ -d "$source_dir/python/tvm" && -d "$source_dir/src" ]] ||
    die "'$source_dir' is not a TVM source checkout (no python/tvm and src/ in it)"
  target_root="$(cd "$source_dir" && pwd)"
  target_kind=source
  if [[ -z "$tvm_version" ]]; then
    tag="$(git -C "$target_root" describe --tags --exact-match HEAD 2>/dev/null || true)"
    if [[ "$tag" =~ ^v([0-9]+\.[0-9]+\.[0-9]+)$ ]]; then
      tvm_version="${BASH_REMATCH[1]}"
    elif [[ -f "$target_root/python/tvm/_version.py" ]]; then
      tvm_version="$(sed -n "s/^__version__ = version = '\(.*\)'/\1/p" "$target_root/python/tvm/_version.py")"
    else
      tvm_version="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$target_root/python/tvm/libinfo.py" 2>/dev/null || true)"
    fi
  fi
  [[ -n "$tvm_version" ]] ||
    die "cannot tell the TVM version of '$target_root' (no release tag at HEAD); pass --tvm-version"
else
  command -v "$python" >/dev/null || die "no Python interpreter '$python'; pass --python"
  info="$("$python" - <<'PY' 2>/dev/null || true
import importlib.metadata, importlib.util, os
spec = importlib.util.find_spec("tvm")
print(importlib.metadata.version("apache-tvm"))
print(os.path.dirname(list(spec.submodule_search_locations)[0]))
PY
)"
  [[ -n "$info" ]] ||
    die "no apache-tvm wheel in '$python'; install it (pip install apache-tvm==<pin>, see upstream/tvm.pin) or pass --source DIR"
  [[ -z "$tvm_version" ]] || die "--tvm-version is only for --source checkouts"
  tvm_version="$(sed -n 1p <<<"$info")"
  target_root="$(sed -n 2p <<<"$info")"
  target_kind=wheel
  [[ "$mode" == check || -w "$target_root/tvm" ]] ||
    die "cannot write to '$target_root/tvm'; use a virtual environment you own"
fi

# --- the series for that version ------------------------------------------------------
series=""
supported=()
for s in "$PATCH_DIR/series" "$PATCH_DIR"/backports/*/series; do
  read -r -a versions <<<"$(sed -n 's/^# versions://p' "$s")"
  supported+=("${versions[@]}")
  for v in "${versions[@]}"; do
    [[ "$v" == "$tvm_version" ]] && series="$s"
  done
done
[[ -n "$series" ]] ||
  die "TVM $tvm_version is not supported; this series supports TVM ${supported[*]}"
series_dir="$(dirname "$series")"
mapfile -t patches < <(grep -v -e '^#' -e '^[[:space:]]*$' "$series")

version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; }
patch_files() { sed -n 's|^diff --git a/\(.*\) b/.*|\1|p' "$1"; }
# The release named in a DEP-3 "Applied-Upstream: v0.24.0, <url>" header (empty if none).
fixed_upstream_in() {
  sed -n 's/^Applied-Upstream: v\{0,1\}\([0-9][0-9.]*[0-9]\).*/\1/p' "$1" | head -n1
}
is_python_side() { ! patch_files "$1" | grep -qv -e '^python/' -e '^tests/'; }
# Where a file named in a patch lives in the target (empty: not installed in a wheel).
target_path() {
  if [[ "$target_kind" == source ]]; then echo "$target_root/$1"
  elif [[ "$1" == python/tvm/* ]]; then echo "$target_root/${1#python/}"
  fi
}

# --- classify every patch; copy the files the series touches to a scratch tree ---------
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# git apply must not mistake the scratch tree for part of an enclosing repository.
export GIT_CEILING_DIRECTORIES="$(dirname "$scratch")"
git_apply() { (cd "$scratch" && git apply --whitespace=nowarn "${exclude[@]}" "$@"); }
exclude=()
[[ "$target_kind" == wheel ]] && exclude=(--exclude='tests/*')

declare -A state
touched=()
for p in "${patches[@]}"; do
  file="$series_dir/$p"
  [[ -f "$file" ]] || EXIT_CODE=1 die "series $series names a missing patch: $p"
  fixed="$(fixed_upstream_in "$file")"
  if [[ -n "$fixed" ]] && version_ge "$tvm_version" "$fixed"; then
    state[$p]="fixed upstream in $fixed"
  elif [[ "$target_kind" == wheel ]] && ! is_python_side "$file"; then
    state[$p]="needs a source build (C++ change)"
  else
    state[$p]=pending
    while read -r f; do
      dest="$(target_path "$f")"
      [[ -n "$dest" ]] || continue
      touched+=("$f")
      if [[ -f "$dest" ]]; then
        mkdir -p "$scratch/$(dirname "$f")"
        cp -p "$dest" "$scratch/$f"
      fi
    done < <(patch_files "$file")
  fi
done

# An earlier version of a patch, from this repository's git history, that is applied to
# the scratch tree: writes it to $scratch/.old.patch and prints its commit.
applied_old_version() {
  local rel="${1#"$ROOT"/}" commit
  git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 1
  while read -r commit; do
    git -C "$ROOT" show "$commit:$rel" >"$scratch/.old.patch" 2>/dev/null || continue
    cmp -s "$scratch/.old.patch" "$1" && continue
    if git_apply --check -R "$scratch/.old.patch" 2>/dev/null; then
      git -C "$ROOT" rev-parse --short "$commit"
      return 0
    fi
  done < <(git -C "$ROOT" log --format=%H -- "$rel" 2>/dev/null)
  return 1
}

# --- walk the series on the scratch tree ----------------------------------------------
order=("${patches[@]}")
if [[ "$mode" == revert ]]; then
  order=()
  for ((i = ${#patches[@]} - 1; i >= 0; i--)); do order+=("${patches[i]}"); done
fi
changes=0
failed=""
for p in "${order[@]}"; do
  [[ "${state[$p]}" == pending ]] || continue
  file="$series_dir/$p"
  if git_apply --check "$file" 2>/dev/null; then
    if [[ "$mode" == revert ]]; then state[$p]="not applied"; continue; fi
    git_apply "$file"
    state[$p]=$([[ "$mode" == check ]] && echo "not applied" || echo applied)
    changes=$((changes + 1))
  elif git_apply --check -R "$file" 2>/dev/null; then
    if [[ "$mode" != revert ]]; then state[$p]="already applied"; continue; fi
    git_apply -R "$file"
    state[$p]=reverted
    changes=$((changes + 1))
  elif old="$(applied_old_version "$file")"; then
    # The target has an earlier version of this patch: take it out first.
    git_apply -R "$scratch/.old.patch"
    if [[ "$mode" == revert ]]; then
      state[$p]="reverted (version $old)"
    elif git_apply --check "$file" 2>/dev/null; then
      git_apply "$file"
      state[$p]=$([[ "$mode" == check ]] && echo "older version applied ($old)" ||
        echo "updated from $old")
    else
      state[$p]="DOES NOT APPLY"
      failed="$p"
      break
    fi
    changes=$((changes + 1))
  else
    state[$p]="DOES NOT APPLY"
    failed="$p"
    break
  fi
done

echo "TVM $tvm_version ($target_kind: $target_root), series ${series#"$ROOT"/}"
for p in "${patches[@]}"; do
  printf '  %-34s %s\n' "${state[$p]}" "$p"
done

if [[ -n "$failed" ]]; then
  echo "apply.sh: $failed does not apply to $target_root:" >&2
  git_apply --check "$series_dir/$failed" 2>&1 | sed 's/^/  /' >&2 || true
  EXIT_CODE=1 die "nothing was written; the target is unchanged"
fi
if [[ "$mode" == check ]]; then
  [[ $changes -eq 0 ]] || { echo "$changes patch(es) not applied yet"; exit 1; }
  exit 0
fi
if [[ $changes -eq 0 ]]; then
  echo "nothing to do"
  exit 0
fi

# --- all patches went through: write the touched files back ---------------------------
for f in $(printf '%s\n' "${touched[@]}" | sort -u); do
  dest="$(target_path "$f")"
  if [[ -f "$scratch/$f" ]]; then
    mkdir -p "$(dirname "$dest")"
    cmp -s "$scratch/$f" "$dest" 2>/dev/null || cp "$scratch/$f" "$dest"
  elif [[ -f "$dest" ]]; then
    rm "$dest"
  fi
done
echo "$([[ "$mode" == revert ]] && echo reverted || echo applied) $changes patch(es)"
