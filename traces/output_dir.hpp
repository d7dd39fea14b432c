// Output folders: created with an error that names them, and held by one
// job at a time (two jobs writing one folder would interleave their files).
#pragma once

#include <string>
#include <vector>

namespace ep {

// Creates `dir` and its parents. Throws ep::Error naming `dir` (and `flag`,
// e.g. "--out", when given) with the system's reason: a read-only parent,
// a parent that is a file, a full disk.
void create_output_dir(const std::string& dir, const std::string& flag = "");

// An exclusive lock on an output folder: flock(2) on DIR/.elasticpipe.lock,
// which records the holder (pid and command). Released by the destructor or
// when the process exits, however it exits (the kernel drops the lock), so
// a killed job never leaves a folder locked. Creates `dir` first. A second
// job on the same folder gets ep::Error naming the folder, `flag` and the
// holder. A job that ends removes the lock file, and the folders it created
// where nothing was written (refused after taking the lock): no trace.
// A job killed leaves the lock file, unlocked: the next job takes it.
class OutputDirLock {
 public:
  OutputDirLock(const std::string& dir, const std::string& command, const std::string& flag = "");
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  int fd_ = -1;
  std::string lock_path_;
  std::vector<std::string> created_;  // the folders it created, innermost first; empty if not the lock file
};

}  // namespace ep
