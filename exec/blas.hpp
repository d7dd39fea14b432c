// Which BLAS LibTorch's matrix products run on. Debian's libtorch calls
// libblas.so.3, and Debian's alternatives system decides what that is: the
// reference BLAS of libblas3 (plain loops, one thread) unless an optimised
// one such as libopenblas0-openmp is installed. On the tiny ViT, a training
// step ran 6-8x slower on the reference BLAS (docs/RESULTS.md), which no
// plan or profile can make up for, so commands that compute say which one
// they got.
#pragma once

#include <string>

namespace ep::exec {

struct BlasLibrary {
  std::string name;        // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  bool reference = false;  // Debian's unoptimised reference BLAS (libblas3)
};

// Looks the provider up in this process (the library that defines sgemm_).
[[nodiscard]] BlasLibrary blas_library();

// A warning for the user when this process runs on the reference BLAS;
// empty otherwise.
[[nodiscard]] std::string blas_warning();

}  // namespace ep::exec
