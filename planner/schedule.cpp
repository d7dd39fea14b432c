// Action text, schedule CSV and the lowering pass.
#include "planner/schedule.hpp"

#include <array>
#include <charconv>
#include <iterator>
#include <ostream>
#include <sstream>

#include "planner/error.hpp"

namespace ep {

namespace {

struct Token {
  ActionKind kind;
  std::string_view text;
};

// Longest first, so "FZ" is not read as "F" followed by garbage.
constexpr std::array<Token, 11> kTokens = {{
    {ActionKind::SendAct, "SEND_F"},
    {ActionKind::SendGrad, "SEND_B"},
    {ActionKind::RecvAct, "RECV_F"},
    {ActionKind::RecvGrad, "RECV_B"},
    {ActionKind::OptimizerStep, "OPT"},
    {ActionKind::FrozenForward, "FZ"},
    {ActionKind::CacheRead, "CR"},
    {ActionKind::CacheWrite, "CW"},
    {ActionKind::AllReduce, "AR"},
    {ActionKind::Forward, "F"},
    {ActionKind::Backward, "B"},
}};

std::string_view token_of(ActionKind kind) {
  for (const Token& t : kTokens) {
    if (t.kind == kind) return t.text;
  }
  return "?";
}

bool is_send(ActionKind k) { return k == ActionKind::SendAct || k == ActionKind::SendGrad; }

// Canonical non-negative decimal (no sign, no leading zero, at most 9
// digits so it fits an int). Advances `s` past it; -1 when there is none.
int take_number(std::string_view& s) {
  std::size_t n = 0;
  while (n < s.size() && n < 9 && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || (n > 1 && s[0] == '0')) return -1;
  int value = 0;
  std::from_chars(s.data(), s.data() + n, value);
  s.remove_prefix(n);
  return value;
}

int parse_int_field(std::string_view text, std::string_view what, int line) {
  std::string_view rest = text;
  const int value = take_number(rest);
  if (value < 0 || !rest.empty()) {
    throw Error("schedule CSV line " + std::to_string(line) + ": bad " + std::string(what) +
                " '" + std::string(text) + "'");
  }
  return value;
}

}  // namespace

bool is_compute(ActionKind k) {
  return k == ActionKind::Forward || k == ActionKind::Backward || k == ActionKind::FrozenForward ||
         k == ActionKind::OptimizerStep;
}

bool is_transfer(ActionKind k) {
  return k == ActionKind::SendAct || k == ActionKind::RecvAct || k == ActionKind::SendGrad ||
         k == ActionKind::RecvGrad;
}

std::string to_string(const Action& a) {
  std::string out = std::to_string(a.stage);
  out += token_of(a.kind);
  if (a.kind == ActionKind::AllReduce) {
    out += std::to_string(a.bucket);
  } else if (a.kind != ActionKind::OptimizerStep) {
    out += std::to_string(a.microbatch);
  }
  if (is_transfer(a.kind) && a.peer_device >= 0) {
    out += is_send(a.kind) ? '>' : '<';
    out += std::to_string(a.peer_device);
  }
  return out;
}

Action parse_action(std::string_view text) {
  const auto fail = [&]() { return Error("bad action '" + std::string(text) + "'"); };
  std::string_view rest = text;
  Action a;
  a.stage = take_number(rest);
  if (a.stage < 0) throw fail();
  const Token* token = nullptr;
  for (const Token& t : kTokens) {
    if (rest.starts_with(t.text)) {
      token = &t;
      break;
    }
  }
  if (token == nullptr) throw fail();
  a.kind = token->kind;
  rest.remove_prefix(token->text.size());
  if (a.kind == ActionKind::AllReduce) {
    a.bucket = take_number(rest);
    if (a.bucket < 0) throw fail();
  } else if (a.kind != ActionKind::OptimizerStep) {
    a.microbatch = take_number(rest);
    if (a.microbatch < 0) throw fail();
  }
  if (is_transfer(a.kind) && !rest.empty()) {
    if (rest[0] != (is_send(a.kind) ? '>' : '<')) throw fail();
    rest.remove_prefix(1);
    a.peer_device = take_number(rest);
    if (a.peer_device < 0) throw fail();
  }
  if (!rest.empty()) throw fail();
  return a;
}

std::ostream& operator<<(std::ostream& os, const Action& a) { return os << to_string(a); }

std::string to_csv(const Schedule& s) {
  std::string out = "# schedule=" + to_string(s.kind) + " K=" + std::to_string(s.K) +
                    " M=" + std::to_string(s.M) + " v=" + std::to_string(s.v) + "\n";
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    out += std::to_string(d);
    for (const Action& a : s.devices[d]) out += "," + to_string(a);
    out += '\n';
  }
  return out;
}

Schedule parse_schedule_csv(std::string_view csv) {
  std::vector<std::string_view> lines;
  while (!csv.empty()) {
    const std::size_t nl = csv.find('\n');
    std::string_view line = csv.substr(0, nl);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    csv.remove_prefix(nl == std::string_view::npos ? csv.size() : nl + 1);
  }
  if (lines.empty()) throw Error("schedule CSV: empty");

  // Header: "# schedule=<kind> K=<K> M=<M> v=<v>".
  std::istringstream header{std::string(lines[0])};
  const std::vector<std::string> fields{std::istream_iterator<std::string>(header), {}};
  constexpr std::array<std::string_view, 5> keys = {"#", "schedule=", "K=", "M=", "v="};
  const auto value = [&](std::size_t i) {
    if (fields.size() != keys.size() || !fields[i].starts_with(keys[i])) {
      throw Error("schedule CSV line 1: expected '# schedule=<kind> K=<K> M=<M> v=<v>', found '" +
                  std::string(lines[0]) + "'");
    }
    return std::string_view(fields[i]).substr(keys[i].size());
  };
  value(0);
  Schedule s;
  const std::string_view kind_name = value(1);
  bool known = false;
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                         ScheduleKind::LoopingBreadthFirst, ScheduleKind::LoopingDepthFirst}) {
    if (to_string(k) == kind_name) {
      s.kind = k;
      known = true;
    }
  }
  if (!known) throw Error("schedule CSV line 1: unknown schedule '" + std::string(kind_name) + "'");
  s.K = parse_int_field(value(2), "K", 1);
  s.M = parse_int_field(value(3), "M", 1);
  s.v = parse_int_field(value(4), "v", 1);

  for (std::size_t i = 1; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    std::string_view line = lines[i];
    if (line.empty() && i + 1 == lines.size()) break;  // trailing newline
    std::vector<std::string_view> cells;
    while (true) {
      const std::size_t comma = line.find(',');
      cells.push_back(line.substr(0, comma));
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    if (parse_int_field(cells[0], "device", line_no) != static_cast<int>(s.devices.size())) {
      throw Error("schedule CSV line " + std::to_string(line_no) + ": expected device " +
                  std::to_string(s.devices.size()) + ", found '" + std::string(cells[0]) + "'");
    }
    std::vector<Action>& row = s.devices.emplace_back();
    for (std::size_t c = 1; c < cells.size(); ++c) {
      try {
        row.push_back(parse_action(cells[c]));
      } catch (const Error& e) {
        throw e.with_context("schedule CSV line " + std::to_string(line_no));
      }
    }
  }
  if (static_cast<int>(s.devices.size()) != s.K) {
    throw Error("schedule CSV: K=" + std::to_string(s.K) + " but " +
                std::to_string(s.devices.size()) + " device rows");
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Schedule& s) { return os << to_csv(s); }

Schedule lower(const Schedule& in) {
  Schedule out = in;
  const int S = in.num_stages();
  for (std::size_t d = 0; d < in.devices.size(); ++d) {
    std::vector<Action>& list = out.devices[d];
    list.clear();
    for (const Action& a : in.devices[d]) {
      if (is_transfer(a.kind)) throw Error("lower: schedule already has transfer " + to_string(a));
      const int s = a.stage;
      const int m = a.microbatch;
      const bool from_prev = s > 0 && in.device_of(s - 1) != in.device_of(s);
      const bool to_next = s + 1 < S && in.device_of(s + 1) != in.device_of(s);
      if (a.kind == ActionKind::Forward) {
        if (from_prev) list.push_back({ActionKind::RecvAct, s, m, -1, in.device_of(s - 1)});
        list.push_back(a);
        if (to_next) list.push_back({ActionKind::SendAct, s, m, -1, in.device_of(s + 1)});
      } else if (a.kind == ActionKind::Backward) {
        if (to_next) list.push_back({ActionKind::RecvGrad, s, m, -1, in.device_of(s + 1)});
        list.push_back(a);
        if (from_prev) list.push_back({ActionKind::SendGrad, s, m, -1, in.device_of(s - 1)});
      } else {
        list.push_back(a);
      }
    }
  }
  return out;
}

}  // namespace ep

std::size_t std::hash<ep::Action>::operator()(const ep::Action& a) const noexcept {
  // Fields are small non-negative ints (or -1): pack, then mix once.
  std::size_t h = static_cast<std::size_t>(a.kind);
  for (int field : {a.stage, a.microbatch, a.bucket, a.peer_device}) {
    h = h * 1000003u + static_cast<std::size_t>(field + 1);
  }
  return h ^ (h >> 29);
}
