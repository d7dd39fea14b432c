// Every simulation runs in a forked child of a process that built the
// platform and never ran it. SimGrid's clock only moves forward and an
// Engine is created once per process, so runs that shared one process would
// each start at a different clock value and round differently: the same
// request would not give the same doubles twice. A fresh child starts every
// run at time 0 from the same pristine engine, and a SimGrid abort
// (xbt_die) kills only the child.
//
// The Simulator's runs are forked by a ForkServer: a small single-threaded
// process forked once, right after the platform is built, that forks one
// child per run. Forking from the planning process itself would copy the
// page tables of everything it has grown since (memo, traces, threads) and
// make both sides pay copy-on-write faults and TLB shoot-downs while the
// child lives. ChildPool forks from the caller (sweep groups, tests).
#pragma once

#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "planner/error.hpp"

namespace ep::sim {

// What the child sends back: trivially copyable values and strings, in order.
class ByteWriter {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(s.size());
    buf_ += s;
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put(v.size());
    for (const T& x : v) put(x);
  }
  template <class... T>
  void put_all(const T&... v) {
    (put(v), ...);
  }
  [[nodiscard]] const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& bytes) : buf_(bytes) {}
  template <class T>
  T get() {
    if constexpr (is_vector<T>::value) {
      T v(get<std::size_t>());
      for (auto& x : v) x = get<typename T::value_type>();
      return v;
    } else if constexpr (std::is_same_v<T, std::string>) {
      const auto n = get<std::size_t>();
      need(n);
      std::string s = buf_.substr(pos_, n);
      pos_ += n;
      return s;
    } else {
      static_assert(std::is_trivially_copyable_v<T>);
      T v;
      need(sizeof v);
      std::memcpy(&v, buf_.data() + pos_, sizeof v);
      pos_ += sizeof v;
      return v;
    }
  }
  template <class... T>
  void get_into(T&... v) {
    ((v = get<T>()), ...);
  }
  [[nodiscard]] bool at_end() const { return pos_ == buf_.size(); }

 private:
  template <class T>
  struct is_vector : std::false_type {};
  template <class T, class A>
  struct is_vector<std::vector<T, A>> : std::true_type {};
  void need(std::size_t n) const {
    if (pos_ + n > buf_.size()) throw Error("simulator: truncated result from the simulation process");
  }
  const std::string& buf_;
  std::size_t pos_ = 0;
};

// The subprocess pool: children started one at a time and collected as
// they end, so a caller can keep starting runs while others go on
// (run_in_children and the sweep's groups are built on it). Every
// child is forked from the calling process, which must be the one that
// built the engine and never ran it.
class ChildPool {
 public:
  struct Ended {
    std::size_t id = 0;
    std::string bytes;  // what the body wrote (empty on error)
    std::string error;  // empty on success
  };
  ChildPool() = default;
  ChildPool(const ChildPool&) = delete;
  ChildPool& operator=(const ChildPool&) = delete;
  ~ChildPool();  // waits for the children still running

  void start(const std::function<void(ByteWriter&)>& body, std::size_t id);
  [[nodiscard]] std::size_t running() const { return running_.size(); }
  // Blocks until at least one child has ended; returns the children that
  // ended. With no child running it returns at once.
  std::vector<Ended> wait();

 private:
  struct Child {
    int pid = -1;
    int fd = -1;
    std::size_t id = 0;
    std::string bytes;
  };
  std::vector<Child> running_;
};

// The fork server. `serve(job, out)` runs in a fresh child of the server
// for every job. Thread-safe: any thread may call run(), and at most
// `at_once` children run at a time over all callers.
class ForkServer {
 public:
  using Serve = std::function<void(const std::string& job, ByteWriter& out)>;
  // Forks the server now: call it while the process is single-threaded and
  // in the state every child must start from.
  explicit ForkServer(Serve serve);
  ~ForkServer();  // ends the server (the runs have returned by then)
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  // What each job's child wrote, in the order of `jobs`. An ep::Error or
  // std::exception thrown by `serve` is rethrown here as ep::Error with its
  // message (the first failure, once every started child has ended); a
  // child that dies gives an ep::Error saying so.
  std::vector<std::string> run(const std::vector<std::string>& jobs, int at_once);

 private:
  int start(const std::string& job);  // the read end of the job's result pipe
  int sock_ = -1;
  int pid_ = -1;
  std::mutex send_mutex_;   // one job's message at a time on the socket
  std::mutex slots_mutex_;  // guards running_
  std::condition_variable slot_free_;
  int running_ = 0;
};

// Runs `body` in a forked child and returns what it wrote. An ep::Error or
// std::exception thrown by `body` is rethrown here as ep::Error with its
// message; a child that dies (signal, abort) gives an ep::Error naming it.
[[nodiscard]] std::string run_in_child(const std::function<void(ByteWriter&)>& body);

// The same for several bodies, at most `jobs` children at a time (runs are
// independent, so they use every core). Results in the order of `bodies`;
// the first failure is thrown once all children have ended.
[[nodiscard]] std::vector<std::string> run_in_children(
    const std::vector<std::function<void(ByteWriter&)>>& bodies, int jobs);

}  // namespace ep::sim
