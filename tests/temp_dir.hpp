// A scratch folder for one test, shared by every test suite.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ep::test {

// A fresh folder under the system temp dir, unique to this process and
// object (ctest runs test cases in parallel processes), removed with
// everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& what = "test")
      : path_(std::filesystem::temp_directory_path() /
              ("ep_" + what + "_" + std::to_string(::getpid()) + "_" + std::to_string(count_++))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] std::string path() const { return path_.string(); }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to NAME in the folder; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return file(name);
  }

 private:
  static inline int count_ = 0;
  std::filesystem::path path_;
};

}  // namespace ep::test
