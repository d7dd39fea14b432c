// Every file the tools read is opened here: configs, profiles, replay
// files, traces and CSVs, checkpoints and their pointers, weights and
// datasets. Only a regular file (after symbolic links) is read, and no more
// of it than its format can hold: a directory, a device (/dev/zero), a FIFO
// or a socket is refused without blocking, and so is a file beyond the
// bound, before anything of its size is allocated. Every refusal is an
// ep::Error naming the path, the format and the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <string>

namespace ep {

// What a reader expects: its name in messages ("config", "profile") and the
// most bytes the format can hold, with the reason for that bound.
struct InputFormat {
  const char* name;
  std::int64_t max_bytes;
  const char* why;
};

// An open, checked input file; reads go through it.
class InputFile {
 public:
  InputFile(std::string path, const InputFormat& format);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  [[nodiscard]] const std::string& path() const { return path_; }
  // The size when it was opened (the bound was checked against it).
  [[nodiscard]] std::int64_t size() const { return size_; }
  // Exactly n bytes from the current position; a file that ended early (it
  // shrank while read) or an I/O error throws naming the path.
  void read_exactly(void* out, std::size_t n);
  // The file as a stream, for readers that parse as they read (large
  // traces); it ends at the size checked at opening.
  [[nodiscard]] std::istream& stream();
  // The descriptor, handed over to a reader that goes on from it (gzdopen);
  // it is then that reader's to close.
  [[nodiscard]] int release();

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;
  class Buffer;
  std::unique_ptr<Buffer> buffer_;
  std::unique_ptr<std::istream> stream_;
};

// The whole content of `path`, checked as above.
[[nodiscard]] std::string read_input_file(const std::string& path, const InputFormat& format);

}  // namespace ep
