// Every output file is written through here: under a temporary name in its
// own directory, every write checked, fsync'd, then renamed over the final
// name (and the directory fsync'd). A reader sees the previous file or the
// whole new one, never a part of it; a full disk, a read-only folder or a
// vanished directory is an ep::Error naming the file and the system's
// reason, and leaves no temporary file behind. Files that belong together
// (a run's outputs) are renamed only once all of them are written.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace ep {

class AtomicFile {
 public:
  // Creates the temporary file beside `path` (throws naming `path`).
  explicit AtomicFile(std::string path);
  // Without commit(): removes the temporary file.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  [[nodiscard]] std::ostream& stream();
  // For a writer that takes a file name instead of a stream: it writes the
  // temporary file, and its errors are re-thrown naming the final path.
  void write_with(const std::function<void(const std::string& temp_path)>& writer);
  // Checks every write, fsyncs, renames over the final path and fsyncs the
  // directory. Throws ep::Error naming the final path.
  void commit();

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  friend void commit_together(std::initializer_list<AtomicFile*> files);
  void finish();   // flush, check, fsync, close: the data is on disk
  void publish();  // rename over the final path, fsync the directory

  class Buffer;
  std::string path_, temp_;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<std::ostream> stream_;
  bool finished_ = false, published_ = false;
};

// Every file written and on disk before the first is renamed: a failure
// while writing any of them replaces none.
void commit_together(std::initializer_list<AtomicFile*> files);

// `bytes` as the whole content of `path`, atomically.
void write_file_atomically(const std::string& path, std::string_view bytes);
// `path` written by a writer that takes a file name (AtomicFile::write_with).
void write_file_atomically(const std::string& path, const std::function<void(const std::string& temp_path)>& writer);

// Writes `path` in place and fsyncs it, every write checked: for files
// inside a directory that is itself published by a rename (checkpoints).
void write_file_durably(const std::string& path, std::span<const std::uint8_t> bytes);
// A rename is durable once its directory is fsync'd.
void fsync_directory(const std::string& dir);

}  // namespace ep
