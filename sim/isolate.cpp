#include "sim/isolate.hpp"

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ep::sim {

namespace {

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent reports the truncation
    done += static_cast<std::size_t>(n);
  }
}

// The child's result, or the error it reports.
std::string finish(int pid, int fd, const std::string& bytes, std::string* error) {
  ::close(fd);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus))
    *error = "simulator: the simulation process died with signal " + std::to_string(WTERMSIG(wstatus)) +
             " (SimGrid's message, if any, is on stderr)";
  else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || bytes.empty())
    *error = "simulator: the simulation process failed (SimGrid's message, if any, is on stderr)";
  else if (bytes[0] != 0)
    *error = bytes.substr(1);
  else
    return bytes.substr(1);
  return {};
}

}  // namespace

void ChildPool::start(const std::function<void(ByteWriter&)>& body, std::size_t id) {
  int fd[2];
  if (::pipe(fd) != 0) throw Error("simulator: pipe() failed: " + std::string(std::strerror(errno)));
  std::fflush(nullptr);  // or the child would inherit, and might flush, unwritten stdio buffers
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd[0]);
    ::close(fd[1]);
    throw Error("simulator: fork() failed: " + std::string(std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(fd[0]);
    ByteWriter out;
    char status = 0;
    std::string message;
    try {
      body(out);
    } catch (const std::exception& e) {
      status = 1;
      message = e.what();
    } catch (...) {
      status = 1;
      message = "unknown exception";
    }
    ByteWriter framed;
    framed.put(status);
    write_all(fd[1], framed.bytes());
    write_all(fd[1], status == 0 ? out.bytes() : message);
    std::fflush(nullptr);
    ::_exit(0);  // no destructors, no atexit handlers: the parent owns that state
  }
  ::close(fd[1]);
  running_.push_back({pid, fd[0], id, {}});
}

std::vector<ChildPool::Ended> ChildPool::wait(int wake_fd) {
  std::vector<Ended> ended;
  // Read every running child's pipe as it fills, so none blocks on a full pipe.
  while (ended.empty() && (!running_.empty() || wake_fd >= 0)) {
    std::vector<pollfd> fds;
    for (const Child& c : running_) fds.push_back({c.fd, POLLIN, 0});
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw Error("simulator: poll() failed: " + std::string(std::strerror(errno)));
    }
    for (std::size_t i = running_.size(); i-- > 0;) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char chunk[1 << 16];
      const ssize_t n = ::read(running_[i].fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        running_[i].bytes.append(chunk, static_cast<std::size_t>(n));
        continue;
      }
      Ended e;
      e.id = running_[i].id;
      e.bytes = finish(running_[i].pid, running_[i].fd, running_[i].bytes, &e.error);
      ended.push_back(std::move(e));
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (wake_fd >= 0 && (fds.back().revents & POLLIN)) break;
  }
  return ended;
}

ChildPool::~ChildPool() {
  for (const Child& c : running_) {
    std::string ignored;
    (void)finish(c.pid, c.fd, c.bytes, &ignored);
  }
}

std::vector<std::string> run_in_children(const std::vector<std::function<void(ByteWriter&)>>& bodies, int jobs) {
  std::vector<std::string> results(bodies.size());
  ChildPool pool;
  std::string error;
  std::size_t next = 0;
  while (next < bodies.size() || pool.running() > 0) {
    while (next < bodies.size() && static_cast<int>(pool.running()) < std::max(1, jobs) && error.empty())
      pool.start(bodies[next], next), ++next;
    if (pool.running() == 0) break;
    for (ChildPool::Ended& e : pool.wait()) {
      results[e.id] = std::move(e.bytes);
      if (error.empty()) error = e.error;
    }
  }
  if (!error.empty()) throw Error(error);
  return results;
}

std::string run_in_child(const std::function<void(ByteWriter&)>& body) {
  return run_in_children({body}, 1).front();
}

}  // namespace ep::sim
