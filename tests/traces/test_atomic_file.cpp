// Output files: all or nothing under every failure a disk can give (full,
// read-only, a parent that is a file), and one job per output folder.
#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/error.hpp"
#include "tests/traces/damage.hpp"
#include "tests/traces/support.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"

using Catch::Matchers::Contains;
using ep::test::slurp;
using ep::test::TempDir;

namespace {

// The names in `dir`, hidden ones (temporary files) included.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

const std::string kBig(200000, 'x');

}  // namespace

TEST_CASE("atomic file: written whole, replacing the previous file, no temporary left", "[atomic]") {
  TempDir dir;
  const std::string path = dir.file("out.csv");
  ep::write_file_atomically(path, "first\n");
  CHECK(slurp(path) == "first\n");
  ep::write_file_atomically(path, kBig);
  CHECK(slurp(path) == kBig);
  {
    ep::AtomicFile f(path);
    f.stream() << "streamed " << 42 << '\n';
    CHECK(slurp(path) == kBig);  // nothing visible before commit
    f.commit();
  }
  CHECK(slurp(path) == "streamed 42\n");
  CHECK(listing(dir.path()) == std::vector<std::string>{"out.csv"});
}

TEST_CASE("atomic file: an uncommitted file leaves nothing behind", "[atomic]") {
  TempDir dir;
  {
    ep::AtomicFile f(dir.file("never.json"));
    f.stream() << kBig;
  }
  CHECK(listing(dir.path()).empty());
}

TEST_CASE("atomic file: a full disk is an error naming the file, and the old file survives", "[atomic]") {
  TempDir dir;
  const std::string path = dir.file("chunks.csv");
  ep::write_file_atomically(path, "previous run\n");
  {
    ep::test::FileSizeLimit full(8192);  // 8 KiB left: the 0, 4096 or 8192 bytes of 17 KB
    CHECK_THROWS_WITH(ep::write_file_atomically(path, kBig),
                      Contains(path + ": write failed: File too large") && Contains("nothing written"));
  }
  CHECK(slurp(path) == "previous run\n");
  CHECK(listing(dir.path()) == std::vector<std::string>{"chunks.csv"});
}

TEST_CASE("atomic file: files committed together are all replaced or none", "[atomic]") {
  TempDir dir;
  ep::write_file_atomically(dir.file("summary.json"), "old summary\n");
  ep::write_file_atomically(dir.file("weights.bin"), "old weights\n");
  {
    ep::test::FileSizeLimit full(8192);
    ep::AtomicFile summary(dir.file("summary.json")), weights(dir.file("weights.bin"));
    summary.stream() << "new summary\n";
    weights.stream() << kBig;  // does not fit
    CHECK_THROWS_WITH(ep::commit_together({&summary, &weights}), Contains(dir.file("weights.bin")));
  }
  // The summary that did fit was not published beside old weights.
  CHECK(slurp(dir.file("summary.json")) == "old summary\n");
  CHECK(slurp(dir.file("weights.bin")) == "old weights\n");
  CHECK(listing(dir.path()) == std::vector<std::string>{"summary.json", "weights.bin"});
}

TEST_CASE("atomic file: a writer that takes a file name, its errors name the final path", "[atomic]") {
  TempDir dir;
  const std::string path = dir.file("grad_norms.csv");
  ep::write_file_atomically(path, [](const std::string& temp) { std::ofstream(temp) << "step,layer,grad_norm\n"; });
  CHECK(slurp(path) == "step,layer,grad_norm\n");
  CHECK_THROWS_WITH(ep::write_file_atomically(path, [](const std::string& temp) {
                      std::ofstream(temp) << "half";
                      throw ep::Error(temp + ": write failed");
                    }),
                    Contains(path + ": "));
  CHECK(slurp(path) == "step,layer,grad_norm\n");
  CHECK(listing(dir.path()) == std::vector<std::string>{"grad_norms.csv"});
}

TEST_CASE("atomic file: unwritable places are errors naming the path", "[atomic]") {
  TempDir dir;
  ep::write_file_atomically(dir.file("afile"), "x");
  SECTION("a parent that is a file") {
    CHECK_THROWS_WITH(ep::write_file_atomically(dir.file("afile/out.csv"), "y"),
                      Contains(dir.file("afile/out.csv")) && Contains("Not a directory"));
  }
  SECTION("a folder that does not exist") {
    CHECK_THROWS_WITH(ep::write_file_atomically(dir.file("gone/out.csv"), "y"),
                      Contains(dir.file("gone/out.csv")) && Contains("No such file or directory"));
  }
  SECTION("a read-only folder") {
    if (::geteuid() == 0) {
      WARN("running as root, who may write into a read-only folder: checked with a read-only tmpfs below");
      return;
    }
    std::filesystem::create_directory(dir.file("ro"));
    std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    CHECK_THROWS_WITH(ep::write_file_atomically(dir.file("ro/out.csv"), "y"),
                      Contains(dir.file("ro/out.csv")) && Contains("Permission denied"));
  }
}

TEST_CASE("atomic file: a real full or read-only file system (tmpfs, where mounting is allowed)", "[atomic]") {
  TempDir dir;
  const std::string mnt = dir.file("mnt");
  std::filesystem::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    WARN("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): covered by the file-size limit above");
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount(at.c_str()); }
  } unmount{mnt};
  const std::string path = mnt + "/trace.json";
  ep::write_file_atomically(path, "old\n");
  CHECK_THROWS_WITH(ep::write_file_atomically(path, kBig), Contains(path) && Contains("No space left on device"));
  CHECK(slurp(path) == "old\n");
  CHECK(listing(mnt) == std::vector<std::string>{"trace.json"});
  REQUIRE(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=64k") == 0);
  CHECK_THROWS_WITH(ep::write_file_atomically(path, "new\n"), Contains(path) && Contains("Read-only file system"));
  CHECK_THROWS_WITH(ep::create_output_dir(mnt + "/out", "--out"),
                    Contains("--out " + mnt + "/out") && Contains("Read-only file system"));
}

TEST_CASE("durable write: every write is checked (/dev/full)", "[atomic]") {
  const std::vector<std::uint8_t> bytes(4096, 1);
  CHECK_THROWS_WITH(ep::write_file_durably("/dev/full", bytes), Contains("/dev/full: write failed: No space left on device"));
}

TEST_CASE("output folder: created with an error naming it and the flag", "[atomic]") {
  TempDir dir;
  ep::write_file_atomically(dir.file("afile"), "x");
  ep::create_output_dir(dir.file("a/b/c"));
  CHECK(std::filesystem::is_directory(dir.file("a/b/c")));
  CHECK_THROWS_WITH(ep::create_output_dir(dir.file("afile/sub"), "--out"),
                    Contains("--out " + dir.file("afile/sub") + ": cannot create the output folder"));
  CHECK_THROWS_WITH(ep::create_output_dir(dir.file("afile"), "--out"), Contains("Not a directory"));
}

TEST_CASE("output folder: one job at a time, the second told who holds it", "[atomic]") {
  TempDir dir;
  const std::string out = dir.file("run");
  {
    const ep::OutputDirLock first(out, "elasticpipe train a.toml --out run", "--out");
    CHECK_THROWS_WITH(ep::OutputDirLock(out, "elasticpipe simulate b.toml --out run", "--out"),
                      Contains("--out " + out + ": the output folder is in use by another job (pid " +
                               std::to_string(::getpid()) + ": elasticpipe train a.toml --out run)"));
  }
  CHECK_NOTHROW(ep::OutputDirLock(out, "elasticpipe simulate b.toml --out run"));  // released
}

TEST_CASE("output folder: a job that wrote nothing leaves nothing, one that wrote keeps it all", "[atomic]") {
  TempDir dir;
  const std::string out = dir.file("a/b/run");
  { const ep::OutputDirLock refused_later(out, "elasticpipe train a.toml --out a/b/run"); }
  CHECK_FALSE(std::filesystem::exists(dir.file("a")));  // the folders it created went with the lock
  {
    const ep::OutputDirLock wrote(out, "elasticpipe simulate a.toml --out a/b/run");
    ep::write_file_atomically(out + "/summary.json", "{}\n");
  }
  CHECK(listing(out) == std::vector<std::string>{"summary.json"});  // no lock file left
  // A folder that was there before stays, empty or not.
  std::filesystem::remove(out + "/summary.json");
  { const ep::OutputDirLock again(out, "elasticpipe simulate a.toml --out a/b/run"); }
  CHECK(std::filesystem::is_directory(out));
  CHECK(listing(out).empty());
}

TEST_CASE("output folder: the lock file a killed job left is taken, then removed", "[atomic]") {
  TempDir dir;
  const std::string out = dir.file("run");
  std::filesystem::create_directories(out);
  ep::write_file_atomically(out + "/.elasticpipe.lock", "pid 1: elasticpipe train a.toml\n");
  {
    const ep::OutputDirLock next(out, "elasticpipe train a.toml --out run");
    CHECK(listing(out) == std::vector<std::string>{".elasticpipe.lock"});
  }
  CHECK(listing(out).empty());
}
