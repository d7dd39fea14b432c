// Shared by the trace test files: a fresh folder per test case and file
// reading.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ep::test {

// A fresh folder per test case (ctest runs cases in parallel processes).
class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("ep_trace_tests_" + std::to_string(::getpid()) + "_" + std::to_string(count_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  static inline int count_ = 0;
  std::filesystem::path path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ep::test
