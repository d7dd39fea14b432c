// elasticpipe trace diff: align two traces of the same config (simulated
// and real) and print the per-action-kind time error, then, from the
// epochs.csv beside each trace, the per-epoch time error.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/error.hpp"
#include "traces/diff.hpp"

namespace ep::cli {

Command add_trace_diff(CLI::App& app) {
  struct Args {
    std::string first, second;
    std::string csv;  // the per-epoch table as CSV too
    bool any_workload = false;
  };
  auto a = std::make_shared<Args>();
  auto* trace = app.add_subcommand("trace", "Work with trace files");
  trace->require_subcommand(1);
  auto* cmd = trace->add_subcommand(
      "diff",
      "Align two traces of the same config (e.g. simulated vs real) and print per-action-kind time error, then "
      "per-epoch time error from the epochs.csv beside each trace");
  cmd->add_option("first", a->first, "trace.json (e.g. simulated)")->required();
  cmd->add_option("second", a->second, "trace.json (e.g. real; the reference for MAPE)")->required();
  cmd->add_option("--csv", a->csv, "Also write the per-epoch table and the runs' starts to this CSV file")
      ->check(non_empty("a CSV file"));
  cmd->add_flag("--any-workload", a->any_workload,
                "Compare traces of other sizes or batches as well (the model family and depth must match)");
  return {cmd, [a](int, char**) {
            const auto epochs_of = [](const std::string& trace_path) {
              return (std::filesystem::path(trace_path).parent_path() / "epochs.csv").string();
            };
            if (!a->csv.empty())
              refuse_output_over_input(a->csv, "--csv", {a->first, a->second, epochs_of(a->first), epochs_of(a->second)});
            const trace::Trace x = trace::read_chrome_trace(a->first);
            const trace::Trace y = trace::read_chrome_trace(a->second);
            trace::TraceDiff d;
            try {
              d = trace::diff_traces(x, y, a->any_workload);
            } catch (const Error& e) {
              throw e.with_context("trace diff " + a->first + " " + a->second);
            }
            std::cout << trace::format_diff(d, x, y);
            // Each run's epochs.csv, where it sits beside the trace (what
            // train and simulate write into one folder).
            const std::string ea = epochs_of(a->first), eb = epochs_of(a->second);
            std::error_code ec;
            const bool have_a = std::filesystem::exists(ea, ec), have_b = std::filesystem::exists(eb, ec);
            if (!have_a || !have_b) {
              if (!a->csv.empty())
                throw Error("trace diff --csv " + a->csv + ": there is no " + (have_a ? eb : ea) +
                            " to compare per epoch");
              std::cout << "\nper epoch: left out, there is no " << (have_a ? eb : ea) << "\n";
              return 0;
            }
            std::vector<trace::EpochDiff> epochs;
            try {
              epochs = trace::diff_epochs(trace::read_epoch_csv(ea), x.mode, trace::read_epoch_csv(eb), y.mode);
            } catch (const Error& e) {
              throw e.with_context("trace diff " + a->first + " " + a->second);
            }
            std::cout << "\n" << trace::format_epoch_diff(epochs) << trace::format_start_notes(x, y);
            if (!a->csv.empty()) {
              trace::write_epoch_diff_csv(epochs, trace::start_of(x), trace::start_of(y), a->csv);
              std::cout << "wrote " << a->csv << "\n";
            }
            return 0;
          }};
}

}  // namespace ep::cli
