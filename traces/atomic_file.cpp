#include "traces/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>

#include "planner/error.hpp"

namespace ep {
namespace {

std::string reason(int err) { return std::strerror(err); }

// Writes all of [p, p + n) to fd; returns 0 or the errno of the failure.
int write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

std::string directory_of(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}

// ".<name>.tmp-<pid>-<n>" beside `path`: unique within this process, and
// the pid keeps other processes' apart.
std::string temp_path_for(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path p(path);
  return (std::filesystem::path(directory_of(path)) /
          ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
      .string();
}

}  // namespace

// A stream buffer over a file descriptor that remembers why a write failed
// (std::ofstream only says that one did).
class AtomicFile::Buffer : public std::streambuf {
 public:
  explicit Buffer(int fd) : fd_(fd) { setp(data_, data_ + sizeof data_); }
  ~Buffer() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  [[nodiscard]] int error() const { return error_; }
  [[nodiscard]] int fd() const { return fd_; }
  // Closes the descriptor: 0 or the errno of close(2).
  int close() {
    if (fd_ < 0) return 0;
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 protected:
  int_type overflow(int_type ch) override {
    if (drain() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return drain(); }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n >= static_cast<std::streamsize>(sizeof data_)) {  // large blocks go straight through
      if (drain() != 0) return 0;
      if (error_ == 0) error_ = write_all(fd_, s, static_cast<std::size_t>(n));
      return error_ == 0 ? n : 0;
    }
    return std::streambuf::xsputn(s, n);
  }

 private:
  int drain() {
    if (error_ == 0 && pptr() > pbase()) error_ = write_all(fd_, pbase(), static_cast<std::size_t>(pptr() - pbase()));
    setp(data_, data_ + sizeof data_);
    return error_ == 0 ? 0 : -1;
  }

  int fd_;
  int error_ = 0;
  char data_[1 << 16];
};

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp_ = temp_path_for(path_);
    fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt > 100))
      throw Error(path_ + ": cannot create the file: " + reason(errno));
  }
  buffer_ = std::make_unique<Buffer>(fd);
  stream_ = std::make_unique<std::ostream>(buffer_.get());
}

AtomicFile::~AtomicFile() {
  if (published_) return;
  stream_.reset();
  buffer_.reset();  // closes the descriptor
  ::unlink(temp_.c_str());
}

std::ostream& AtomicFile::stream() { return *stream_; }

void AtomicFile::write_with(const std::function<void(const std::string&)>& writer) {
  try {
    writer(temp_);
  } catch (const Error& e) {
    throw Error(path_ + ": " + e.what());
  }
}

void AtomicFile::finish() {
  if (finished_) return;
  stream_->flush();
  int err = buffer_->error();
  if (err == 0 && !*stream_) err = EIO;
  const char* what = "write failed";
  // fsync covers what a writer wrote through its own descriptor too.
  if (err == 0 && ::fsync(buffer_->fd()) != 0) err = errno, what = "fsync failed";
  if (const int close_err = buffer_->close(); err == 0 && close_err != 0) err = close_err, what = "close failed";
  if (err != 0) throw Error(path_ + ": " + what + ": " + reason(err) + " (nothing written)");
  finished_ = true;
}

void AtomicFile::publish() {
  if (std::rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error(path_ + ": cannot rename " + temp_ + " over it: " + reason(errno) + " (nothing written)");
  published_ = true;
  fsync_directory(directory_of(path_));
}

void AtomicFile::commit() { commit_together({this}); }

void commit_together(std::initializer_list<AtomicFile*> files) {
  for (AtomicFile* f : files)
    if (f) f->finish();
  for (AtomicFile* f : files)
    if (f && !f->published_) f->publish();
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.commit();
}

void write_file_atomically(const std::string& path, const std::function<void(const std::string&)>& writer) {
  AtomicFile f(path);
  f.write_with(writer);
  f.commit();
}

void write_file_durably(const std::string& path, std::span<const std::uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create the file: " + reason(errno));
  int err = write_all(fd, reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const char* what = "write failed";
  if (err == 0 && ::fsync(fd) != 0) err = errno, what = "fsync failed";
  if (::close(fd) != 0 && err == 0) err = errno, what = "close failed";
  if (err != 0) throw Error(path + ": " + what + ": " + reason(err));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(dir + ": cannot open the directory: " + reason(errno));
  const int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (err != 0) throw Error(dir + ": fsync failed: " + reason(err));
}

}  // namespace ep
