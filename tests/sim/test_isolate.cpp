// The fork server the Simulator runs every SimGrid run through: answers in
// job order from any number of threads, children that start from the
// state the server was forked in, errors and dying children reported,
// and the limit on children running at once kept over all callers.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "planner/error.hpp"
#include "sim/isolate.hpp"

using namespace ep;
using namespace ep::sim;

namespace {

int g_state = 0;  // what the server's children see: its value when the server was forked

std::string job_of(int i) {
  ByteWriter w;
  w.put(i);
  return w.bytes();
}

}  // namespace

TEST_CASE("fork server: answers in job order, from several threads at once", "[isolate]") {
  g_state = 7;
  ForkServer server([](const std::string& job, ByteWriter& out) {
    ByteReader r(job);
    const int i = r.get<int>();
    out.put_all(i * i + g_state, std::to_string(i));
  });
  g_state = 1000;  // after the fork: the children must not see it
  constexpr int kThreads = 3, kJobs = 17;
  std::vector<std::vector<std::string>> answers(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::string> jobs;
      for (int i = 0; i < kJobs; ++i) jobs.push_back(job_of(100 * t + i));
      answers[t] = server.run(jobs, 2);
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    REQUIRE(answers[t].size() == kJobs);
    for (int i = 0; i < kJobs; ++i) {
      ByteReader r(answers[t][i]);
      const int v = 100 * t + i;
      CHECK(r.get<int>() == v * v + 7);
      CHECK(r.get<std::string>() == std::to_string(v));
      CHECK(r.at_end());
    }
  }
}

TEST_CASE("fork server: an exception in a child is the caller's error, once the others have ended", "[isolate]") {
  ForkServer server([](const std::string& job, ByteWriter& out) {
    ByteReader r(job);
    const int i = r.get<int>();
    if (i == 3) throw Error("job 3 refused");
    out.put(i);
  });
  std::vector<std::string> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(job_of(i));
  CHECK_THROWS_WITH(server.run(jobs, 2), "job 3 refused");
  // The server goes on serving after a failed job.
  const auto again = server.run({job_of(5)}, 1);
  ByteReader r(again.front());
  CHECK(r.get<int>() == 5);
}

TEST_CASE("fork server: a child that dies is reported, and the server goes on", "[isolate]") {
  ForkServer server([](const std::string& job, ByteWriter& out) {
    ByteReader r(job);
    const int i = r.get<int>();
    if (i == 1) std::_Exit(3);  // as a SimGrid abort would, without a word on the pipe
    out.put(i);
  });
  CHECK_THROWS_WITH(server.run({job_of(0), job_of(1)}, 2), Catch::Contains("ended without a result"));
  const auto again = server.run({job_of(2)}, 1);
  ByteReader r(again.front());
  CHECK(r.get<int>() == 2);
}

TEST_CASE("fork server: at most `at_once` children run at a time, over all callers", "[isolate]") {
  // Each child holds one of two lock files while it works; a third child
  // running at once would find both held.
  char dir[] = "/tmp/ep_isolate_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string base = dir;
  ForkServer server([base](const std::string&, ByteWriter& out) {
    for (int slot = 0; slot < 2; ++slot) {
      const int fd = ::open((base + "/slot" + std::to_string(slot)).c_str(), O_CREAT | O_RDWR, 0600);
      if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        ::usleep(20000);
        ::close(fd);  // before the answer: a slot freed later would be seen as held
        out.put(slot);
        return;
      }
      if (fd >= 0) ::close(fd);
    }
    throw Error("a third child was running");
  });
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      try {
        (void)server.run({job_of(0), job_of(1), job_of(2), job_of(3)}, 2);
      } catch (const Error&) {
        ++failures;
      }
    });
  for (std::thread& th : threads) th.join();
  CHECK(failures == 0);
  std::system(("rm -rf " + base).c_str());
}
