#include "planner/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "planner/error.hpp"

namespace ep {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// "a symbolic link to " when `path` itself is one, so that the message
// explains a name that looks like a plain file.
std::string via_link(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) ? "a symbolic link to " : "";
}

}  // namespace

// Reads the descriptor in blocks, up to the size checked at opening.
class InputFile::Buffer : public std::streambuf {
 public:
  Buffer(int fd, std::int64_t size) : fd_(fd), left_(size) {}

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    ssize_t r = 0;
    do r = left_ > 0 ? ::read(fd_, data_, static_cast<std::size_t>(std::min<std::int64_t>(left_, sizeof data_))) : 0;
    while (r < 0 && errno == EINTR);
    if (r <= 0) return traits_type::eof();  // the parser then reports the text as cut short
    left_ -= r;
    setg(data_, data_, data_ + r);
    return traits_type::to_int_type(*gptr());
  }

 private:
  int fd_;
  std::int64_t left_;
  char data_[1 << 16];
};

InputFile::InputFile(std::string path, const InputFormat& format) : path_(std::move(path)) {
  const std::string what = std::string(" the ") + format.name;
  if (path_.empty()) throw Error(std::string("an empty path given for") + what);
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
  // below); regular files ignore the flag.
  do fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw Error(path_ + ": cannot open" + what + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(path_ + ": cannot read" + what + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(path_ + ": " + via_link(path_) + kind_of(st.st_mode) + ", expected" + what +
                " in a regular file");
  }
  size_ = st.st_size;
  if (size_ > format.max_bytes) {
    ::close(fd_);
    throw Error(path_ + ": " + std::to_string(size_) + " bytes, expected" + what + " of at most " +
                std::to_string(format.max_bytes) + " bytes (" + format.why + ")");
  }
}

InputFile::~InputFile() {
  stream_.reset();
  buffer_.reset();
  if (fd_ >= 0) ::close(fd_);
}

std::istream& InputFile::stream() {
  if (!stream_) {
    buffer_ = std::make_unique<Buffer>(fd_, size_);
    stream_ = std::make_unique<std::istream>(buffer_.get());
  }
  return *stream_;
}

void InputFile::read_exactly(void* out, std::size_t n) {
  auto* p = static_cast<char*>(out);
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd_, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(path_ + ": read error: " + std::strerror(errno));
    if (r == 0)
      throw Error(path_ + ": ended after " + std::to_string(got) + " of " + std::to_string(n) +
                  " bytes (changed while being read)");
    got += static_cast<std::size_t>(r);
  }
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string read_input_file(const std::string& path, const InputFormat& format) {
  InputFile f(path, format);
  std::string text(static_cast<std::size_t>(f.size()), '\0');
  f.read_exactly(text.data(), text.size());
  return text;
}

}  // namespace ep
