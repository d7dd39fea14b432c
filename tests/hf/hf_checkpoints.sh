#!/usr/bin/env bash
# hf_checkpoints.py on scripts/setup.sh's Python (torch and transformers);
# reported skipped where it is missing.
#   hf_checkpoints.sh HF_CHECK ELASTICPIPE SOURCE_DIR
set -euo pipefail
src=$3
source "$src/tests/bench/lib.sh"
torch_python "$src"
if ! "$py" -c 'import transformers, tokenizers, PIL' 2>/dev/null; then
  echo "skipped: no transformers in $py (scripts/setup.sh installs scripts/hf-requirements.txt)"
  exit 77
fi
exec "$py" "$src/tests/hf/hf_checkpoints.py" "$@"
