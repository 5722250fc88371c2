#!/bin/sh
# Apply patches to the SGLang installed in this image (run by containers/sglang/Dockerfile).
#
#   apply-patches.sh PATCH_DIR      every file in PATCH_DIR, in name order
#
# Patches are diffs against SGLang's repository root (`git diff`, `git format-patch`:
# a/python/sglang/srt/...). They are applied where SGLang really is:
#   - a git checkout installed in editable mode (the lmsysorg/sglang images:
#     /sgl-workspace/sglang): at the checkout's root, `patch -p1`;
#   - a wheel in site-packages: in site-packages, `patch -p2` (or -p1 for diffs made
#     against the package directory itself: a/sglang/srt/...).
# With GIT_REF set, the checkout is first moved to that ref (git fetch).
# Any patch that does not apply cleanly fails the build, naming the patch.
set -eu
patch_dir=$1
PY=${PYTHON:-python3}

pkg_dir=$($PY -c 'import os, sglang; print(os.path.dirname(os.path.abspath(sglang.__file__)))') || {
  echo "apply-patches: sglang is not importable with $PY in this image" >&2; exit 1; }
checkout=$(cd "$pkg_dir/../.." && pwd)
[ -d "$checkout/python/sglang" ] && [ -e "$checkout/.git" ] || checkout=

if [ -n "${GIT_REF:-}" ]; then
  if [ -z "$checkout" ]; then
    checkout=/sgl-workspace/sglang-src
    git clone --filter=blob:none https://github.com/sgl-project/sglang.git "$checkout"
    $PY -m pip install --no-deps -e "$checkout/python"
  fi
  echo "apply-patches: checking out SGLang $GIT_REF in $checkout"
  git -C "$checkout" fetch --depth=1 origin "$GIT_REF"
  git -C "$checkout" checkout --force FETCH_HEAD
  pkg_dir=$checkout/python/sglang
fi

if command -v patch >/dev/null 2>&1; then
  try() { patch --batch --forward --dry-run --silent -d "$1" -p"$2" <"$3" >/dev/null 2>&1; }
  apply() { patch --batch --forward -d "$1" -p"$2" <"$3"; }
else  # git apply understands the same -p levels
  try() { git -C "$1" apply --check -p"$2" "$3" >/dev/null 2>&1; }
  apply() { git -C "$1" apply -v -p"$2" "$3"; }
fi

site=$(dirname "$pkg_dir")
count=0
for p in "$patch_dir"/*; do
  [ -f "$p" ] || continue
  done_=
  for place in ${checkout:+"$checkout:1"} "$site:2" "$site:1"; do
    dir=${place%:*} level=${place##*:}
    if try "$dir" "$level" "$p"; then
      echo "apply-patches: $(basename "$p") -> $dir (-p$level)"
      apply "$dir" "$level" "$p"
      done_=1
      break
    fi
  done
  [ -n "$done_" ] || { echo "apply-patches: $(basename "$p") does not apply to SGLang at $pkg_dir" >&2; exit 1; }
  count=$((count + 1))
done
echo "apply-patches: $count patch(es) applied to $pkg_dir"
