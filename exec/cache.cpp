#include "exec/cache.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <latch>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "exec/streams.hpp"
#include "exec/torch_compat.hpp"
#include "planner/cache_policy.hpp"
#include "planner/error.hpp"

namespace ep::exec {

namespace {

// The tags are plain int64s in a file that several processes map, so no
// std::atomic object lives there: std::atomic_ref operates atomically on
// them. Lock-free atomics are address-free, which is what makes them work
// across two mappings of one page; a lock-based fallback would not.
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic_ref<std::int64_t>::is_always_lock_free);
static_assert(std::atomic_ref<std::int64_t>::required_alignment <= alignof(std::int64_t));

constexpr char kMagic[8] = {'E', 'P', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kMaxDims = 8;
constexpr std::int64_t kRowAlign = 64;  // a cache line: rows written by two processes never share one

// Rows are copied by as many threads as the calling thread's intra-op count
// (the plan's threads for its worker), each at least this much: one
// thread's memcpy out of a mapping moves 5-6 GB/s on a 2-core VM (two:
// 10), short of a batch of ViT-B/16 rows (77.5 MB at batch 128) costing
// less than the frozen forward it replaces on a GPU. The helpers come from
// ATen's inter-op pool (at::launch), started once: at::parallel_for's
// OpenMP backend is inline and runs serially in a translation unit built
// without -fopenmp, as this project's are.
constexpr std::size_t kCopyBytesPerThread = std::size_t{1} << 20;

// `copy(k)` for k in [0, n), rows of `row_bytes` each, split over threads.
template <class Copy>
void copy_rows(std::size_t n, std::size_t row_bytes, const Copy& copy) {
  const std::size_t threads = std::clamp<std::size_t>(n * row_bytes / kCopyBytesPerThread, 1,
                                                      static_cast<std::size_t>(std::max(1, at::get_num_threads())));
  const auto part = [&](std::size_t t) {
    for (std::size_t k = n * t / threads; k < n * (t + 1) / threads; ++k) copy(k);
  };
  std::latch helped(static_cast<std::ptrdiff_t>(threads - 1));
  for (std::size_t t = 1; t < threads; ++t)
    at::launch([&, t] {
      part(t);
      helped.count_down();
    });
  part(0);
  helped.wait();
}

// The on-file header, exactly as cache.hpp documents it.
struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t ndim;
  std::int64_t dataset_size;
  std::int64_t entry_numel;
  std::int64_t entry_stride;
  std::int64_t tags_offset;
  std::int64_t data_offset;
  std::int64_t file_bytes;
  std::int64_t shape[kMaxDims];
};
static_assert(sizeof(Header) == 128 && offsetof(Header, shape) == 64);
constexpr std::int64_t kTagsOffset = sizeof(Header);

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

std::int64_t page_size() {
  static const std::int64_t page = ::sysconf(_SC_PAGESIZE);
  return page;
}

std::string posix_error(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

// Closes the descriptor on every path out of the constructor; the mapping
// outlives it.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ActivationCache::ActivationCache(std::string path, std::int64_t dataset_size, std::vector<std::int64_t> entry_shape,
                                 bool create, std::chrono::milliseconds publish_wait)
    : path_(std::move(path)),
      dataset_size_(dataset_size),
      entry_shape_(std::move(entry_shape)),
      publish_wait_(publish_wait) {
  if (dataset_size_ <= 0) throw Error(where() + ": dataset size must be positive, got " + std::to_string(dataset_size_));
  if (entry_shape_.empty() || entry_shape_.size() > kMaxDims)
    throw Error(where() + ": an entry has 1 to " + std::to_string(kMaxDims) + " dimensions, got " +
                shape_string(entry_shape_));
  entry_numel_ = 1;
  for (const std::int64_t d : entry_shape_) {
    if (d <= 0) throw Error(where() + ": entry shape " + shape_string(entry_shape_) + " has a non-positive size");
    if (entry_numel_ > std::numeric_limits<std::int64_t>::max() / 4 / d)
      throw Error(where() + ": entry shape " + shape_string(entry_shape_) + " is too large");
    entry_numel_ *= d;
  }
  entry_stride_ = round_up(entry_numel_ * 4, kRowAlign);
  data_offset_ = round_up(kTagsOffset + 8 * dataset_size_, page_size());
  if (dataset_size_ > (std::numeric_limits<std::int64_t>::max() - data_offset_) / entry_stride_)
    throw Error(where() + ": " + std::to_string(dataset_size_) + " entries of " + shape_string(entry_shape_) +
                " floats do not fit in a file");
  file_bytes_ = data_offset_ + dataset_size_ * entry_stride_;

  Fd fd;
  if (create) {
    // Replace, not truncate: a process still mapping an old cache at this
    // path keeps its own inode instead of faulting (SIGBUS) on pages that
    // truncation took away. O_EXCL: a second creator is a bug of the caller.
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT)
      throw Error(posix_error(where() + ": cannot replace the existing file"));
    fd.fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd.fd < 0) throw Error(posix_error(where() + ": cannot create"));
    // A half-made file would hold its space (possibly most of /dev/shm) and
    // look like a cache to the next opener: delete it on failure.
    const auto fail = [&](const std::string& what) {
      const Error e(posix_error(where() + ": " + what));
      ::unlink(path_.c_str());
      return e;
    };
    if (::ftruncate(fd.fd, file_bytes_) != 0) throw fail("cannot size to " + std::to_string(file_bytes_) + " bytes");
    // Reserve the blocks (tmpfs pages, disk extents) now: writing through the
    // mapping into a hole that the file system cannot fill is a SIGBUS.
    // File systems without fallocate keep the sparse file and that risk.
    if (::fallocate(fd.fd, 0, 0, file_bytes_) != 0 && errno != EOPNOTSUPP)
      throw fail("cannot allocate " + std::to_string(file_bytes_) + " bytes");
  } else {
    fd.fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd.fd < 0) throw Error(posix_error(where() + ": cannot open"));
    check_existing(fd.fd);
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(file_bytes_), PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) {
    const Error e(posix_error(where() + ": cannot map " + std::to_string(file_bytes_) + " bytes"));
    if (create) ::unlink(path_.c_str());
    throw e;
  }
  base_ = static_cast<char*>(p);
  if (create) {
    // The tags are already 0 (empty): ftruncate and fallocate give zeros.
    Header h{};
    h.version = kVersion;
    h.ndim = static_cast<std::uint32_t>(entry_shape_.size());
    h.dataset_size = dataset_size_;
    h.entry_numel = entry_numel_;
    h.entry_stride = entry_stride_;
    h.tags_offset = kTagsOffset;
    h.data_offset = data_offset_;
    h.file_bytes = file_bytes_;
    std::copy(entry_shape_.begin(), entry_shape_.end(), h.shape);
    std::memcpy(base_, &h, sizeof h);
    // The magic last: a creator that dies half-way leaves a file that no
    // opener takes for a cache.
    std::memcpy(base_, kMagic, sizeof kMagic);
  }
  writer_ = std::make_unique<Writer>(*this);  // here, not at a first write, which two threads may make at once
}

// An existing file must be a cache made for this dataset and entry shape,
// with the layout this process computed, and whole.
void ActivationCache::check_existing(int fd) const {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(posix_error(where() + ": cannot stat"));
  Header h{};
  if (st.st_size < static_cast<off_t>(sizeof h) || ::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
    throw Error(where() + ": " + std::to_string(st.st_size) + " bytes, too short for the header: not a cache file");
  const auto mismatch = [&](const std::string& field, const std::string& found, const std::string& expected) {
    return Error(where() + ": header field " + field + " is " + found + ", expected " + expected +
                 " (the file was created for another dataset or model, or is not a cache file)");
  };
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    std::string magic(h.magic, sizeof h.magic);
    for (char& ch : magic)
      if (ch < 0x20 || ch > 0x7e) ch = '?';  // any file can land here: keep the message printable
    throw mismatch("magic", "'" + magic + "'", "'EPCACHE1'");
  }
  if (h.version != kVersion) throw mismatch("version", std::to_string(h.version), std::to_string(kVersion));
  if (h.dataset_size != dataset_size_)
    throw mismatch("dataset_size", std::to_string(h.dataset_size), std::to_string(dataset_size_));
  const std::vector<std::int64_t> shape(h.shape, h.shape + std::min<std::size_t>(h.ndim, kMaxDims));
  if (h.ndim != entry_shape_.size() || shape != entry_shape_)
    throw mismatch("entry_shape", shape_string(shape), shape_string(entry_shape_));
  // Same dataset and shape on one node give the same layout; a difference
  // means a damaged file, which must not be mapped on trust.
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> layout[] = {
      {"entry_numel", {h.entry_numel, entry_numel_}},  {"entry_stride", {h.entry_stride, entry_stride_}},
      {"tags_offset", {h.tags_offset, kTagsOffset}},   {"data_offset", {h.data_offset, data_offset_}},
      {"file_bytes", {h.file_bytes, file_bytes_}},
  };
  for (const auto& [field, v] : layout)
    if (v.first != v.second) throw mismatch(field, std::to_string(v.first), std::to_string(v.second));
  if (st.st_size < file_bytes_)
    throw Error(where() + ": the file is " + std::to_string(st.st_size) + " bytes, its header says " +
                std::to_string(file_bytes_) + ": truncated");
}

// A write's rows to be stored: on the host, or still on a GPU (`device`,
// made by the work before `produced`), where the store copies them to
// pinned memory first.
struct ActivationCache::PendingWrite {
  std::vector<std::pair<std::int64_t, std::size_t>> rows;  // (sample, position in `host`)
  at::Tensor host;
  at::Tensor device;
  std::optional<c10::Event> produced;
  std::int64_t tag_value = 0;
};

// The thread that stores writes behind their callers and publishes their
// tags, in call order.
struct ActivationCache::Writer {
  explicit Writer(ActivationCache& c) : cache(c), thread([this] { run(); }) {}
  ~Writer() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }

  void push(PendingWrite p) {
    std::unique_lock lock(mu);
    // A bound on the rows held for the thread (each write's batch; 77.5 MB
    // at ViT-B/16 and 128): a writer that falls behind makes write() wait.
    // The planner's, so that the simulator queues as many.
    const auto t0 = std::chrono::steady_clock::now();
    cv.wait(lock, [&] { return queue.size() < static_cast<std::size_t>(kCacheWritesInFlight); });
    cache.add_time(&HostTimes::write_queue_s, t0);
    if (failed) std::rethrow_exception(failed);
    queue.push_back(std::move(p));
    cv.notify_all();
  }
  // Every pending write stored; rethrows what failed the thread.
  void flush() {
    std::unique_lock lock(mu);
    const auto t0 = std::chrono::steady_clock::now();
    cv.wait(lock, [&] { return queue.empty(); });
    cache.add_time(&HostTimes::flush_s, t0);
    if (failed) std::rethrow_exception(failed);
  }

  // `p`'s rows into their entries, each tag published after its row. Rows
  // on a GPU come to pinned memory here first, on a side stream after the
  // work that made them: on the cache's thread, so that a pinned block the
  // host allocator has to make (tens of ms for a batch's rows) and the
  // wait for the copy hold up no stage worker queuing device work.
  static void store(ActivationCache& cache, PendingWrite& p) {
    if (p.device.defined()) {
      const auto t0 = std::chrono::steady_clock::now();
      const c10::Device device = p.device.device();
      compat::use_device(device);  // the writer's thread too (see use_device)
      p.host = at::empty(p.device.sizes(), at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
      const c10::Event copied = on_side_stream(device, SideUse::CopyFromDevice, [&](const c10::Stream& side) {
        p.produced->block(side);
        p.host.copy_(p.device, /*non_blocking=*/true);
        used_on_stream(device, side, {&p.device});  // its block stays out of the allocator's hands until the copy is done
      });
      p.device.reset();
      compat::wait(copied);
      cache.add_time(&HostTimes::store_device_s, t0);
    }
    const auto t0 = std::chrono::steady_clock::now();
    cache.check_depths(p);
    const char* const src = static_cast<const char*>(p.host.data_ptr());
    const std::size_t bytes = static_cast<std::size_t>(cache.entry_bytes());
    copy_rows(p.rows.size(), bytes, [&](std::size_t j) {
      const auto [i, k] = p.rows[j];
      std::memcpy(cache.row(i), src + k * bytes, bytes);
      std::atomic_ref<std::int64_t>(*cache.tag(i)).store(p.tag_value, std::memory_order_release);  // publishes the row
    });
    cache.add_time(&HostTimes::store_copy_s, t0);
  }

 private:
  void run() {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopped, nothing left
      PendingWrite& p = queue.front();
      lock.unlock();
      try {
        store(cache, p);
      } catch (...) {
        std::lock_guard relock(mu);
        if (!failed) failed = std::current_exception();
      }
      lock.lock();
      queue.pop_front();  // only now: flush() waits for an empty queue
      cv.notify_all();
    }
  }

  ActivationCache& cache;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<PendingWrite> queue;
  bool stop = false;
  std::exception_ptr failed;
  std::thread thread;  // last: starts once the rest is built
};

ActivationCache::~ActivationCache() {
  writer_.reset();  // stores what is pending, before the mapping goes
  unmap();
}

void ActivationCache::unmap() noexcept {
  if (base_) ::munmap(base_, static_cast<std::size_t>(file_bytes_));
  base_ = nullptr;
}

std::string ActivationCache::where() const { return "activation cache " + path_; }

void ActivationCache::check_index(std::int64_t i) const {
  if (!base_) throw Error(where() + ": used after remove()");
  if (i >= dataset_size_)
    throw Error(where() + ": sample index " + std::to_string(i) + " out of range [0, " +
                std::to_string(dataset_size_) + ")");
}

std::int64_t* ActivationCache::tag(std::int64_t i) const {
  return reinterpret_cast<std::int64_t*>(base_ + kTagsOffset) + i;
}

char* ActivationCache::row(std::int64_t i) const { return base_ + data_offset_ + i * entry_stride_; }

at::Tensor ActivationCache::read(const std::vector<std::int64_t>& indices, int depth, const at::Device& device) {
  if (depth < 0) throw Error(where() + ": read at negative depth " + std::to_string(depth));
  const std::int64_t want = depth + 1;
  const auto deadline = std::chrono::steady_clock::now() + publish_wait_;
  // Every tag first, on this thread (its acquire loads make the rows visible
  // to the copying threads, which start after them), then the rows.
  const auto waited = std::chrono::steady_clock::now();
  for (const std::int64_t i : indices) {
    if (i < 0) continue;
    check_index(i);
    const std::atomic_ref<std::int64_t> t(*tag(i));
    std::int64_t found = t.load(std::memory_order_acquire);
    // Below: the replica that owns the sample has not written it at this
    // depth yet. Poll with a growing sleep, up to the call's deadline.
    for (auto nap = std::chrono::microseconds(50); found < want && std::chrono::steady_clock::now() < deadline;
         nap = std::min(nap * 2, std::chrono::microseconds(2000))) {
      std::this_thread::sleep_for(nap);
      found = t.load(std::memory_order_acquire);
    }
    if (found != want) {
      std::string msg = where() + ": sample " + std::to_string(i) + " holds depth " + std::to_string(found - 1) +
                        (found == 0 ? " (empty)" : "") + ", expected " + std::to_string(depth);
      if (found < want)
        msg += " after waiting " + std::to_string(publish_wait_.count()) +
               " ms for the process that owns it to write it";
      else
        msg += ": depths only grow, so this read is at an older depth than the cache holds";
      throw Error(msg);
    }
  }
  add_time(&HostTimes::read_wait_s, waited);
  // Pinned when bound for a GPU, so the copy there is a DMA.
  const at::Tensor out = rows_to_host(indices, device.is_cuda());
  if (!device.is_cuda()) return out.to(device);
  // On a side stream, so the copy overlaps what the device is still running
  // (the caller runs ahead of the device); the pinned block stays allocated
  // until the copy is done.
  at::Tensor on_device;
  const c10::Event copied =
      on_side_stream(device, SideUse::CopyToDevice, [&](const c10::Stream&) { on_device = out.to(device, /*non_blocking=*/true); });
  after_side_stream(device, copied, {&on_device});
  return on_device;
}

at::Tensor ActivationCache::read_ahead(const std::vector<std::int64_t>& indices, int depth, bool pinned) {
  if (!base_ || depth < 0) return {};
  for (const std::int64_t i : indices) {
    if (i < 0) continue;
    if (i >= dataset_size_ || std::atomic_ref<std::int64_t>(*tag(i)).load(std::memory_order_acquire) != depth + 1)
      return {};
  }
  return rows_to_host(indices, pinned);
}

// The rows of `indices` (tags checked by the caller), a masked slot zeros.
at::Tensor ActivationCache::rows_to_host(const std::vector<std::int64_t>& indices, bool pinned) {
  std::vector<std::int64_t> sizes{static_cast<std::int64_t>(indices.size())};
  sizes.insert(sizes.end(), entry_shape_.begin(), entry_shape_.end());
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(at::kFloat).pinned_memory(pinned));
  char* const dst = static_cast<char*>(out.data_ptr());
  const std::size_t bytes = static_cast<std::size_t>(entry_bytes());
  const auto copy_start = std::chrono::steady_clock::now();
  copy_rows(indices.size(), bytes, [&](std::size_t k) {
    if (indices[k] < 0) std::memset(dst + k * bytes, 0, bytes);
    else std::memcpy(dst + k * bytes, row(indices[k]), bytes);
  });
  add_time(&HostTimes::read_copy_s, copy_start, &HostTimes::reads);
  return out;
}

void ActivationCache::write(const std::vector<std::int64_t>& indices, const at::Tensor& values, int depth, bool behind) {
  if (depth < 0) throw Error(where() + ": write at negative depth " + std::to_string(depth));
  if (!base_) throw Error(where() + ": used after remove()");
  std::vector<std::int64_t> expected{static_cast<std::int64_t>(indices.size())};
  expected.insert(expected.end(), entry_shape_.begin(), entry_shape_.end());
  if (!values.defined() || values.sizes().vec() != expected || !at::isFloatingType(values.scalar_type()))
    throw Error(where() + ": write of " +
                (values.defined() ? shape_string(values.sizes().vec()) + " " + std::string(c10::toString(values.scalar_type()))
                                  : std::string("an undefined tensor")) +
                " for " + std::to_string(indices.size()) + " indices, expected floats " + shape_string(expected));
  PendingWrite p;
  p.tag_value = depth + 1;
  // A sample given twice keeps its last row, as a copy in order would, and
  // no two threads write one row.
  {
    std::unordered_set<std::int64_t> seen;
    for (std::size_t k = indices.size(); k-- > 0;) {
      if (indices[k] < 0) continue;
      check_index(indices[k]);
      if (seen.insert(indices[k]).second) p.rows.emplace_back(indices[k], k);
    }
  }
  check_depths(p);  // here for the caller; again when stored, against what landed since
  {
    std::lock_guard lock(times_mu_);
    ++times_.writes;
  }
  const at::Tensor v = values.detach();
  if (v.is_cuda()) {
    // Marked where the current stream has made the rows; the store copies
    // them from there (behind: the worker goes on queuing meanwhile).
    const c10::Device device = v.device();
    p.produced.emplace(device.type());
    p.produced->record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    p.device = v;
  } else {
    p.host = v.to(at::kFloat).contiguous();  // a no-op for a contiguous float32 tensor
  }
  if (!behind) {
    flush();  // an earlier write behind of these samples must not land after this one
    Writer::store(*this, p);
    return;
  }
  writer_->push(std::move(p));
}

// Every sample of `p` at `p`'s depth or below: a refused write changes nothing.
void ActivationCache::check_depths(const PendingWrite& p) const {
  for (const auto& [i, k] : p.rows) {
    const std::int64_t held = std::atomic_ref<std::int64_t>(*tag(i)).load(std::memory_order_relaxed);
    if (held > p.tag_value)
      throw Error(where() + ": sample " + std::to_string(i) + " holds depth " + std::to_string(held - 1) +
                  ", refusing to write older depth " + std::to_string(p.tag_value - 1) + ": depths only grow");
  }
}

std::chrono::steady_clock::time_point ActivationCache::add_time(double HostTimes::*part,
                                                               std::chrono::steady_clock::time_point since,
                                                               std::int64_t HostTimes::*count) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(times_mu_);
  times_.*part += std::chrono::duration<double>(now - since).count();
  if (count) ++(times_.*count);
  return now;
}

ActivationCache::HostTimes ActivationCache::host_times() const {
  std::lock_guard lock(times_mu_);
  return times_;
}

void ActivationCache::flush() {
  if (writer_) writer_->flush();  // none once removed
}

void ActivationCache::prefetch(const std::vector<std::int64_t>& indices) {
  std::vector<std::int64_t> sorted;
  sorted.reserve(indices.size());
  for (const std::int64_t i : indices) {
    if (i < 0) continue;
    check_index(i);
    sorted.push_back(i);
  }
  if (sorted.empty()) return;
  if (!base_) throw Error(where() + ": used after remove()");
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  // One madvise per run of consecutive indices, over whole pages.
  const std::int64_t page = page_size();
  for (std::size_t a = 0; a < sorted.size();) {
    std::size_t b = a + 1;
    while (b < sorted.size() && sorted[b] == sorted[b - 1] + 1) ++b;
    const std::int64_t begin = (data_offset_ + sorted[a] * entry_stride_) / page * page;
    const std::int64_t end =
        std::min(file_bytes_, round_up(data_offset_ + sorted[b - 1] * entry_stride_ + entry_bytes(), page));
    if (::madvise(base_ + begin, static_cast<std::size_t>(end - begin), MADV_WILLNEED) != 0)
      throw Error(posix_error(where() + ": madvise(WILLNEED) of samples " + std::to_string(sorted[a]) + ".." +
                              std::to_string(sorted[b - 1])));
    a = b;
  }
}

void ActivationCache::remove() {
  writer_.reset();
  unmap();
  if (::unlink(path_.c_str()) != 0) throw Error(posix_error(where() + ": cannot delete"));
}

}  // namespace ep::exec
