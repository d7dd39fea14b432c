#include "exec/blas.hpp"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>

namespace ep::exec {

BlasLibrary blas_library() {
  // The sgemm_ that LibTorch's calls bind to is the first in the global
  // lookup order. Another BLAS may be loaded too (OpenBLAS's liblapack next
  // to the reference libblas), so what counts is who defines this one.
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sgemm == nullptr || dladdr(sgemm, &info) == 0 || info.dli_fname == nullptr)
    return {"built into LibTorch (no sgemm_ exported)", false};
  char resolved[PATH_MAX];
  const std::string path = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  // OpenBLAS names itself, build options and CPU kernel included (Debian's
  // libblas.so.3 of OpenBLAS is a wrapper; dlsym searches its dependencies).
  if (void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD)) {
    using GetConfig = const char* (*)();
    const auto config = reinterpret_cast<GetConfig>(dlsym(self, "openblas_get_config"));
    const std::string name = config ? config() : "";
    dlclose(self);
    if (!name.empty()) return {name, false};
  }
  // The alternatives system links libblas.so.3 into the provider's own
  // directory; the reference BLAS lives in .../blas/.
  const bool reference = path.find("/blas/libblas.so") != std::string::npos;
  return {(reference ? "reference BLAS " : "") + path, reference};
}

std::string blas_warning() {
  const BlasLibrary blas = blas_library();
  if (!blas.reference) return "";
  return "LibTorch's matrix products run on the " + blas.name +
         ", unoptimised and single-threaded (training steps measured 6-8x slower than on OpenBLAS); install an "
         "optimised one: apt-get install libopenblas0-openmp";
}

}  // namespace ep::exec
