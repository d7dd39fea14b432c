// elasticpipe: the command-line program. This file only wires CLI11: each
// command lives in its own file (commands.hpp). Every expected failure is an
// ep::Error, printed once as `ERROR: ...` with exit code 2.
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/exec_commands.hpp"
#include "planner/error.hpp"

namespace {

// CLI11's refusal as one line; a missing command also names the commands.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  if (what.rfind("A subcommand is required", 0) != 0) return what;
  const CLI::App* at = &app;  // the innermost command given (e.g. `trace`)
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : at->get_subcommands())
      if (sub->parsed()) at = sub, deeper = true;
  }
  std::string names;
  for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : "|") + sub->get_name();
  return (at == &app ? std::string() : at->get_name() + ": ") + "expected a command, one of " + names +
         ", found none (--help lists them)";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ep::cli;
  CLI::App app{"ElasticPipe: elastic pipelining with progressive layer freezing (PipeTransformer)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "elasticpipe 0.1");
  std::vector<Command> commands = {add_plan(app), add_schedule(app), add_simulate(app), add_sweep(app)};
  // train, profile and validate run in elasticpipe-exec, with LibTorch;
  // this program checks their input and hands them over (exec_commands.hpp).
#if ELASTICPIPE_EXEC
  commands.push_back(add_train(app));
  commands.push_back(add_profile(app));
  commands.push_back(add_validate(app));
#else
  for (Command& c : add_handed_over_commands(app)) commands.push_back(std::move(c));
#endif
  commands.push_back(add_trace_diff(app));

  set_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    print_error(parse_error_message(app, e));
    return kBadInput;
  }
  try {
    for (const Command& c : commands)
      if (*c.app) return c.run(argc, argv);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  return 0;
}
