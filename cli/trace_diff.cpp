// elasticpipe trace diff: align two traces of the same config (simulated
// and real) and print the per-action-kind time error.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "planner/error.hpp"
#include "traces/diff.hpp"

namespace ep::cli {

Command add_trace_diff(CLI::App& app) {
  struct Args {
    std::string first, second;
  };
  auto a = std::make_shared<Args>();
  auto* trace = app.add_subcommand("trace", "Work with trace files");
  trace->require_subcommand(1);
  auto* cmd = trace->add_subcommand(
      "diff", "Align two traces of the same config (e.g. simulated vs real) and print per-action-kind time error");
  cmd->add_option("first", a->first, "trace.json (e.g. simulated)")->required();
  cmd->add_option("second", a->second, "trace.json (e.g. real; the reference for MAPE)")->required();
  return {cmd, [a](int, char**) {
            const trace::Trace x = trace::read_chrome_trace(a->first);
            const trace::Trace y = trace::read_chrome_trace(a->second);
            trace::TraceDiff d;
            try {
              d = trace::diff_traces(x, y);
            } catch (const Error& e) {
              throw e.with_context("trace diff " + a->first + " " + a->second);
            }
            std::cout << trace::format_diff(d, x, y);
            return 0;
          }};
}

}  // namespace ep::cli
