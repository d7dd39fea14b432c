// The one reader of input files: only regular files, bounded, never
// blocking, every refusal naming the path; JSON with a depth bound.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "planner/input_file.hpp"
#include "planner/json_input.hpp"
#include "tests/planner/support.hpp"

using namespace ep;
using Catch::Contains;
using Catch::StartsWith;

namespace {
constexpr InputFormat kSmall{"test input", 16, "a test's bound"};
}  // namespace

TEST_CASE("input files: a regular file is read whole, within its bound", "[input]") {
  const test::TempDir dir("input_regular");
  CHECK(read_input_file(dir.write("a", "0123456789abcdef"), kSmall) == "0123456789abcdef");
  CHECK(read_input_file(dir.write("empty", ""), kSmall).empty());
  const std::string big = dir.write("big", "0123456789abcdefX");
  CHECK_THAT(test::error_of([&] { (void)read_input_file(big, kSmall); }),
             StartsWith(big + ": 17 bytes, expected the test input of at most 16 bytes (a test's bound)"));
  // Through a symbolic link, the target is what counts.
  std::filesystem::create_symlink(dir.file("a"), dir.file("link"));
  CHECK(read_input_file(dir.file("link"), kSmall).size() == 16);
}

TEST_CASE("input files: anything but a regular file is refused, naming the path", "[input]") {
  const test::TempDir dir("input_special");
  const auto refused = [](const std::string& path, const std::string& why) {
    CHECK_THAT(test::error_of([&] { (void)read_input_file(path, kSmall); }), StartsWith(path + ": " + why));
  };
  refused(dir.file("missing"), "cannot open the test input: No such file or directory");
  refused(dir.file(""), "a directory, expected the test input in a regular file");
  refused("/dev/zero", "a character device, expected the test input in a regular file");
  refused("/dev/null", "a character device");
  std::filesystem::create_symlink("/dev/zero", dir.file("zero"));
  refused(dir.file("zero"), "a symbolic link to a character device");
  CHECK_THAT(test::error_of([&] { (void)read_input_file("", kSmall); }), Contains("an empty path"));

  // A FIFO without a writer: refused at once, not waited on.
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  refused(dir.file("fifo"), "a FIFO");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));

  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = dir.file("sock");
  if (sock.size() < sizeof addr.sun_path) {
    sock.copy(addr.sun_path, sock.size());
    REQUIRE(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    refused(sock, "cannot open the test input");  // open(2) itself refuses a socket
  }
  ::close(s);
}

TEST_CASE("JSON inputs: nesting is bounded, invalid text names the byte", "[input]") {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  CHECK(parse_json(ok, "ok.json").is_array());
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  CHECK_THAT(test::error_of([&] { (void)parse_json(deep, "deep.json"); }),
             StartsWith("deep.json: JSON nested deeper than 64 levels"));
  CHECK_THAT(test::error_of([&] { (void)parse_json<nlohmann::ordered_json>("{\"a\": oops}", "bad.json"); }),
             StartsWith("bad.json: not valid JSON at byte 7"));
  // A caller's callback still sees every element.
  int values = 0;
  const nlohmann::json::parser_callback_t count = [&](int, nlohmann::json::parse_event_t e, nlohmann::json&) {
    values += e == nlohmann::json::parse_event_t::value;
    return true;
  };
  (void)parse_json("[1, 2, 3]", "three.json", count);
  CHECK(values == 3);
}
