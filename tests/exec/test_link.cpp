// How this executable is linked against LibTorch: which library its
// std::filesystem binds to, and that the CUDA path is where it should be.
#include "tests/exec/pch.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

// The library that defines `symbol` first in the global lookup order, the
// order this executable's own references bind in.
std::string defining_library(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

}  // namespace

// torch 2.x wheels' libtorch.so exports a copy of std::filesystem whose
// remove_all calls through a null pointer; linked after it, libstdc++ lost
// and every remove_all of the executor's tests crashed (exec/CMakeLists.txt).
TEST_CASE("std::filesystem binds to libstdc++, not to a copy inside LibTorch") {
  for (const char* symbol : {"_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE",
                             "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",
                             "_ZNSt10filesystem6removeERKNS_7__cxx114pathE",
                             "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathE"}) {
    INFO(symbol);
    // The library's path is printed on failure: where it binds elsewhere
    // (an executable that holds libstdc++ itself, a torch library), it says which.
    const std::string lib = defining_library(symbol);
    CHECK_THAT(lib, Catch::Contains("libstdc++") && !Catch::Contains("torch"));
  }
  // And it works: a nested tree is removed whole.
  const auto root = std::filesystem::temp_directory_path() / ("ep-link-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "f") << "x";
  CHECK(std::filesystem::remove_all(root) == 4);
  CHECK_FALSE(std::filesystem::exists(root));
}
