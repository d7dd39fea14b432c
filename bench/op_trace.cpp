// LD_PRELOAD'ed into elasticpipe-exec or a Python running PyTorch (the same
// LibTorch): every ATen operator, autograd node and user scope the process
// runs, in order, one line each (thread, nesting depth, name), written to
// $EP_OP_TRACE at exit. bench/ops_vs_pytorch.py compares the two.
#include <ATen/record_function.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Trace {
  std::mutex mu;
  std::vector<std::string> lines;
};
// Never destroyed: operators may still run on other threads during exit.
Trace& trace = *new Trace;
thread_local int depth = 0;

struct Install {
  Install() {
    if (!std::getenv("EP_OP_TRACE")) return;
    at::addGlobalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              const char* kind = fn.scope() == at::RecordScope::BACKWARD_FUNCTION ? "backward"
                                 : fn.scope() == at::RecordScope::USER_SCOPE      ? "user"
                                                                                  : "op";
              std::string line = std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())) + "\t" +
                                 std::to_string(depth) + "\t" + kind + "\t" + fn.name();
              {
                std::lock_guard lock(trace.mu);
                trace.lines.push_back(std::move(line));
              }
              ++depth;
              return nullptr;
            },
            [](const at::RecordFunction&, at::ObserverContext*) { --depth; })
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE}));
  }
  ~Install() {
    const char* path = std::getenv("EP_OP_TRACE");
    if (!path) return;
    std::FILE* f = std::fopen(path, "w");
    if (!f) return;
    std::lock_guard lock(trace.mu);
    for (const std::string& line : trace.lines) std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
} install;

}  // namespace
