// iterations.csv (traces/SCHEMA.md, "Iteration losses").
#include <charconv>
#include <cstdio>

#include "traces/io.hpp"
#include "traces/run_outputs.hpp"

namespace ep::trace {

namespace {
constexpr const char* kHeader = "iteration,loss";
}

void write_iterations_csv(const std::vector<double>& losses, std::ostream& out, const std::string& path) {
  std::string text = std::string(kHeader) + "\n";
  char buf[64];
  for (std::size_t i = 0; i < losses.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%zu,%.9g\n", i, losses[i]);
    text += buf;
  }
  if (!(out << text)) throw Error("writing " + path + ": write failed");
}

std::vector<double> read_iterations_csv(const std::string& path) {
  InputFile file(path, {"iterations.csv", detail::kPerIterationBytes, detail::kPerIterationWhy});
  std::istream& in = file.stream();
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ":1: empty file, expected the header " + kHeader);
  if (line != kHeader) throw Error(path + ":1: header: expected '" + kHeader + "', found '" + line + "'");
  std::vector<double> losses;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    const std::string where = path + ":" + std::to_string(line_no);
    const auto comma = line.find(',');
    if (comma == std::string::npos || line.find(',', comma + 1) != std::string::npos)
      throw Error(where + ": expected 2 fields (iteration,loss), found '" + line + "'");
    const std::string index = line.substr(0, comma), loss = line.substr(comma + 1);
    std::size_t i = 0;
    const auto [ip, iec] = std::from_chars(index.data(), index.data() + index.size(), i);
    if (iec != std::errc() || ip != index.data() + index.size() || index.empty() || i != losses.size())
      throw Error(where + ": column 'iteration': expected " + std::to_string(losses.size()) + ", found '" + index +
                  "'");
    double v = 0;
    const auto [lp, lec] = std::from_chars(loss.data(), loss.data() + loss.size(), v);
    if (lec != std::errc() || lp != loss.data() + loss.size() || loss.empty())
      throw Error(where + ": column 'loss': expected a number, found '" + loss + "'");
    losses.push_back(v);
  }
  return losses;
}

}  // namespace ep::trace
