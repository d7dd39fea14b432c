#include "traces/output_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "planner/error.hpp"

namespace ep {
namespace {

std::string named(const std::string& dir, const std::string& flag) {
  return flag.empty() ? dir : flag + " " + dir;
}

}  // namespace

void create_output_dir(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec && !std::filesystem::is_directory(dir, ec))
    ec = std::make_error_code(std::errc::not_a_directory);
  if (ec) throw Error(named(dir, flag) + ": cannot create the output folder: " + ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(named(dir, flag) + ": cannot write into the output folder: " + std::strerror(errno));
}

OutputDirLock::OutputDirLock(const std::string& dir, const std::string& command, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> missing;  // innermost first
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty() && !fs::exists(fs::symlink_status(p, ec));
       p = p.parent_path()) {
    missing.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  create_output_dir(dir, flag);
  const std::string path = (fs::path(dir) / ".elasticpipe.lock").string();
  // A lock file is removed by the job that holds it when it ends: a job
  // that opened it just before may then hold a lock on a removed file, so
  // the lock counts only while the path still names the file locked.
  for (int attempt = 0;; ++attempt) {
    const bool new_lock = !fs::exists(fs::symlink_status(path, ec));
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path + ": cannot open the output folder's lock: " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[512] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK) throw Error(path + ": cannot lock the output folder: " + std::strerror(err));
      std::string holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "a job that has not said who it is";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      throw Error(named(dir, flag) + ": the output folder is in use by another job (" + holder +
                  "); wait for it to finish or choose another folder");
    }
    struct stat held {}, named_now {};
    if (::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &named_now) == 0 && held.st_ino == named_now.st_ino &&
        held.st_dev == named_now.st_dev) {
      if (new_lock) created_ = std::move(missing);
      break;
    }
    ::close(fd_);
    fd_ = -1;
    if (attempt == 100) throw Error(path + ": cannot lock the output folder: its lock file keeps being replaced");
  }
  lock_path_ = path;
  const std::string text = "pid " + std::to_string(::getpid()) + ": " + command + "\n";
  // Who holds it is for the message above only: a failure to record it
  // does not stop the job.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
  }
}

OutputDirLock::~OutputDirLock() {
  if (fd_ < 0) return;
  // The lock file goes while the lock is held (a job started on the folder
  // meanwhile was refused, not queued), and the folders created for the job
  // with it where nothing was written into them.
  ::unlink(lock_path_.c_str());
  for (const std::string& d : created_)
    if (::rmdir(d.c_str()) != 0) break;
  ::close(fd_);  // drops the lock
}

}  // namespace ep
