// elasticpipe: the command-line program. This file only wires CLI11: each
// command lives in its own file (commands.hpp). Every expected failure is an
// ep::Error, printed once as `ERROR: ...` with exit code 2.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/error.hpp"

namespace {

// The commands that run LibTorch live in elasticpipe-exec, beside this
// program: loading LibTorch (and the ~300 libraries Debian's links) takes
// about 0.6 s and 190 MB at every start, which plan, schedule, simulate,
// sweep and trace diff do not pay.
#if !ELASTICPIPE_EXEC
constexpr const char* kExecCommands[] = {"train", "profile", "validate"};
constexpr const char* kExecProgram = "elasticpipe-exec";

int run_in_executor(char** argv) {
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  const std::string program = (self.parent_path() / kExecProgram).string();
  ::execv(program.c_str(), argv);  // returns only on failure
  ep::cli::print_error(std::string(argv[1]) + " runs in " + program + ", which cannot be started (" +
                      std::strerror(errno) + "): build with -DELASTICPIPE_EXEC=ON (LibTorch)");
  return ep::cli::kBadInput;
}
#endif

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
#if !ELASTICPIPE_EXEC
  if (argc > 1)
    for (const char* command : kExecCommands)
      if (std::string(argv[1]) == command) return run_in_executor(argv);
#endif

  std::vector<Command> commands = {add_plan(app), add_schedule(app), add_simulate(app), add_sweep(app)};
#if ELASTICPIPE_EXEC
  commands.push_back(add_train(app));
  commands.push_back(add_profile(app));
  commands.push_back(add_validate(app));
#else
  // Listed in --help; `elasticpipe train --help` shows elasticpipe-exec's.
  app.add_subcommand("train", "Train for real with LibTorch (elasticpipe train --help)");
  app.add_subcommand("profile", "Measure this machine's executor into a profile (elasticpipe profile --help)");
  app.add_subcommand("validate", "Run plans for real and in simulation with a fitted cost model (elasticpipe validate --help)");
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
  } catch (const ep::Error& e) {
    print_error(e.what());
    return kBadInput;
  } catch (const std::exception& e) {  // a library's failure (c10d, I/O): not bad input, still one clear line
    const std::string what = e.what();
    print_error(what.substr(0, what.find('\n')));
    return 1;
  }
  return 0;
}
