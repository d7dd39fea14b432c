# Shared by the bench tests (sourced).
# The Python with PyPI's torch that scripts/setup.sh installs, in $py; where
# there is none the test is reported skipped (CTest's SKIP_RETURN_CODE 77).
torch_python() {
  py=$1/build/torch-venv/bin/python
  if ! [ -x "$py" ] || ! "$py" -c 'import torch' 2>/dev/null; then
    echo "skipped: no Python with torch at $py (scripts/setup.sh installs it)"
    exit 77
  fi
}

# `refused WHAT CMD...`: CMD must refuse with one ERROR line and exit 2,
# never a traceback; else the test fails naming WHAT.
refused() {
  local what=$1 rc=0 out
  shift
  out=$("$@" 2>&1) || rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q '^ERROR: ' <<< "$out" ||
    { echo "FAIL: $what: exit $rc: $out"; exit 1; }
}
