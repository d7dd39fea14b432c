#include "sim/isolate.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
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

// What a child runs: `body`, its result or its error framed as
// [status byte][length][bytes] so that a child that dies half-way is told
// from one that finished.
std::string run_framed(const std::function<void(ByteWriter&)>& body) {
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
  framed.put(status == 0 ? out.bytes() : message);
  return framed.bytes();
}

// The child's result from its framed bytes, or the error it reports.
std::string unframe(const std::string& bytes, std::string* error) {
  constexpr std::size_t head = 1 + sizeof(std::size_t);
  std::size_t n = 0;
  if (bytes.size() >= head) std::memcpy(&n, bytes.data() + 1, sizeof n);
  if (bytes.size() < head || bytes.size() - head != n) {
    *error =
        "simulator: the simulation process ended without a result (killed, or SimGrid aborted: its message, if any, "
        "is on stderr)";
    return {};
  }
  if (bytes[0] != 0) {
    *error = bytes.substr(head);
    return {};
  }
  return bytes.substr(head);
}

// The child's result, or the error it reports.
std::string finish(int pid, int fd, const std::string& bytes, std::string* error) {
  ::close(fd);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    *error = "simulator: the simulation process died with signal " + std::to_string(WTERMSIG(wstatus)) +
             " (SimGrid's message, if any, is on stderr)";
    return {};
  }
  return unframe(bytes, error);
}

// Waits until one of `fds` is readable; appends what each readable fd holds
// to its `bytes` and returns the indices whose writers have all closed it,
// highest first.
std::vector<std::size_t> read_some(const std::vector<int>& fds, const std::vector<std::string*>& bytes) {
  std::vector<pollfd> polled;
  for (const int fd : fds) polled.push_back({fd, POLLIN, 0});
  std::vector<std::size_t> closed;
  if (::poll(polled.data(), polled.size(), -1) < 0) {
    if (errno == EINTR) return closed;
    throw Error("simulator: poll() failed: " + std::string(std::strerror(errno)));
  }
  for (std::size_t i = fds.size(); i-- > 0;) {
    if (!(polled[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char chunk[1 << 16];
    const ssize_t n = ::read(fds[i], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0)
      bytes[i]->append(chunk, static_cast<std::size_t>(n));
    else
      closed.push_back(i);
  }
  return closed;
}

// Forks with a channel whose end ends[1] the child keeps and ends[0] the
// parent; each closes the other's. Stdio is flushed first, or the child
// would inherit, and might flush, unwritten buffers.
pid_t fork_with(const int ends[2]) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(ends[0]);
    ::close(ends[1]);
    throw Error("simulator: fork() failed: " + std::string(std::strerror(errno)));
  }
  ::close(ends[pid == 0 ? 0 : 1]);
  return pid;
}

}  // namespace

void ChildPool::start(const std::function<void(ByteWriter&)>& body, std::size_t id) {
  int fd[2];
  if (::pipe(fd) != 0) throw Error("simulator: pipe() failed: " + std::string(std::strerror(errno)));
  const pid_t pid = fork_with(fd);
  if (pid == 0) {
    write_all(fd[1], run_framed(body));
    std::fflush(nullptr);
    ::_exit(0);  // no destructors, no atexit handlers: the parent owns that state
  }
  running_.push_back({pid, fd[0], id, {}});
}

std::vector<ChildPool::Ended> ChildPool::wait() {
  std::vector<Ended> ended;
  // Read every running child's pipe as it fills, so none blocks on a full pipe.
  while (ended.empty() && !running_.empty()) {
    std::vector<int> fds;
    std::vector<std::string*> bytes;
    for (Child& c : running_) fds.push_back(c.fd), bytes.push_back(&c.bytes);
    for (const std::size_t i : read_some(fds, bytes)) {
      Ended e;
      e.id = running_[i].id;
      e.bytes = finish(running_[i].pid, running_[i].fd, running_[i].bytes, &e.error);
      ended.push_back(std::move(e));
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return ended;
}

ChildPool::~ChildPool() {
  for (const Child& c : running_) {
    std::string ignored;
    (void)finish(c.pid, c.fd, c.bytes, &ignored);
  }
}

// ---------------------------------------------------------------- ForkServer

namespace {

// A message header on the fork server's socket: a job's length, and the
// job's result pipe passed along with it (SCM_RIGHTS).
struct Header {
  std::size_t len = 0;
  iovec iov{&len, sizeof len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  Header() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  Header(const Header&) = delete;
  Header& operator=(const Header&) = delete;
};

// The server: reads jobs ([length][bytes], the result pipe's write end
// passed along with the length), forks a child per job and forgets it
// (SIGCHLD ignored: the kernel reaps them). Single-threaded, so a fork here
// never finds a lock held by another thread.
[[noreturn]] void serve_forever(int sock, const ForkServer::Serve& serve) {
  std::signal(SIGCHLD, SIG_IGN);
  for (;;) {
    Header h;
    const ssize_t got = ::recvmsg(sock, &h.msg, MSG_WAITALL);
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof h.len)) ::_exit(0);  // the Simulator is gone
    const std::size_t len = h.len;
    const cmsghdr* c = CMSG_FIRSTHDR(&h.msg);
    if (!c || c->cmsg_type != SCM_RIGHTS) ::_exit(1);
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    std::string job(len, '\0');
    for (std::size_t done = 0; done < len;) {
      const ssize_t n = ::read(sock, job.data() + done, len - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(0);
      done += static_cast<std::size_t>(n);
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(sock);
      write_all(fd, run_framed([&](ByteWriter& out) { serve(job, out); }));
      std::fflush(nullptr);
      ::_exit(0);
    }
    if (pid < 0) {
      const std::string why = "simulator: fork() failed: " + std::string(std::strerror(errno));
      write_all(fd, run_framed([&](ByteWriter&) { throw Error(why); }));
    }
    ::close(fd);
  }
}

void send_all(int sock, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(sock, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw Error("simulator: the simulation server is gone: " + std::string(std::strerror(errno)));
    data += k;
    n -= static_cast<std::size_t>(k);
  }
}

}  // namespace

ForkServer::ForkServer(Serve serve) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error("simulator: socketpair() failed: " + std::string(std::strerror(errno)));
  const pid_t pid = fork_with(sv);
  if (pid == 0) serve_forever(sv[1], serve);
  sock_ = sv[0];
  pid_ = pid;
}

ForkServer::~ForkServer() {
  ::close(sock_);
  int wstatus = 0;
  while (::waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
}

int ForkServer::start(const std::string& job) {
  int fd[2];
  if (::pipe2(fd, O_CLOEXEC) != 0) throw Error("simulator: pipe() failed: " + std::string(std::strerror(errno)));
  try {
    const std::lock_guard lock(send_mutex_);
    Header h;
    h.len = job.size();
    cmsghdr* c = CMSG_FIRSTHDR(&h.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd[1], sizeof(int));
    ssize_t sent;
    while ((sent = ::sendmsg(sock_, &h.msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    if (sent != static_cast<ssize_t>(sizeof h.len))
      throw Error("simulator: the simulation server is gone: " + std::string(std::strerror(errno)));
    send_all(sock_, job.data(), job.size());
  } catch (...) {
    ::close(fd[0]);
    ::close(fd[1]);
    throw;
  }
  ::close(fd[1]);  // the server holds it now, and the child after it
  return fd[0];
}

std::vector<std::string> ForkServer::run(const std::vector<std::string>& jobs, int at_once) {
  struct Pending {
    int fd = -1;
    std::size_t index = 0;
    std::string bytes;
  };
  at_once = std::max(1, at_once);
  std::vector<std::string> results(jobs.size());
  std::vector<Pending> pending;
  std::string error;
  std::size_t next = 0;
  const auto release = [&] {
    const std::lock_guard lock(slots_mutex_);
    --running_;
    slot_free_.notify_all();
  };
  while ((next < jobs.size() && error.empty()) || !pending.empty()) {
    // Start what the slots allow; wait for one only when nothing of ours runs.
    while (next < jobs.size() && error.empty()) {
      {
        std::unique_lock lock(slots_mutex_);
        if (pending.empty())
          slot_free_.wait(lock, [&] { return running_ < at_once; });
        else if (running_ >= at_once)
          break;
        ++running_;
      }
      try {
        pending.push_back({start(jobs[next]), next, {}});
      } catch (const std::exception& e) {
        release();
        error = e.what();
      }
      ++next;
    }
    if (pending.empty()) break;
    std::vector<int> fds;
    std::vector<std::string*> bytes;
    for (Pending& p : pending) fds.push_back(p.fd), bytes.push_back(&p.bytes);
    for (const std::size_t i : read_some(fds, bytes)) {
      ::close(pending[i].fd);
      std::string e;
      results[pending[i].index] = unframe(pending[i].bytes, &e);
      if (error.empty()) error = e;
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      release();
    }
  }
  if (!error.empty()) throw Error(error);
  return results;
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
