// AutoCache's store: the frozen prefix's output per dataset index, tagged
// with the frozen depth (number of frozen layers) it holds, so a read at the
// wrong depth is caught instead of training on stale activations.
//
// It is NODE-SHARED: one file, memory-mapped MAP_SHARED by every process of
// the node, so a replica reads entries another replica wrote. The tier is
// only where the file lives, and the caller picks it: a path on tmpfs
// (/dev/shm) is the host-memory tier, a path on a disk file system the disk
// tier (the page cache then holds what fits, and prefetch() reads ahead the
// rest). This class does not look at the directory.
//
// File layout (native byte order and page size: the file never leaves the
// node; all offsets in bytes from the start of the file):
//
//   [0, 128)        header
//       0   char[8]   magic "EPCACHE1"
//       8   uint32    version (1)
//       12  uint32    ndim, 1..8
//       16  int64     dataset_size N (entries 0..N-1)
//       24  int64     entry_numel E (product of the shape), float32 values
//       32  int64     entry_stride: E*4 rounded up to a multiple of 64
//       40  int64     tags_offset (128)
//       48  int64     data_offset: tags_offset + 8*N rounded up to the page size
//       56  int64     file_bytes: data_offset + N*entry_stride
//       64  int64[8]  shape (ndim used, the rest 0)
//   [128, 128+8N)   tags: one int64 per entry, accessed only atomically
//                   (lock-free, hence address-free, so valid across
//                   processes): 0 = empty, d+1 = holds depth d
//   [data_offset, file_bytes)
//                   entries: entry i at data_offset + i*entry_stride, E
//                   float32 values, row-major in `shape`. Rows are 64-byte
//                   (cache-line) aligned, not page-aligned: page alignment
//                   would waste up to a page per entry on small entries, and
//                   prefetch() rounds each row out to whole pages anyway.
//
// Publication: write() memcpy's the row, then stores the tag with
// memory_order_release; read() loads the tag with memory_order_acquire
// before copying, so a reader that sees the tag sees the whole row. Depth
// tags only grow (entries are advanced to deeper frozen prefixes, a write at
// an older depth is refused), so a tag below the depth read means "another
// process has not written it yet: wait" and a tag above means a bug.
//
// Assumed, not locked: nobody writes an entry while someone reads it. The
// trainer's sampler gives each sample to one replica per iteration, and a
// replica writes only samples it owns, and reads a sample at a depth only
// after its write at that depth was published, so this holds; the row copy
// itself is a plain memcpy, rows split over as many threads as the caller's
// intra-op count.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ep::exec {

class ActivationCache {
 public:
  // Opens the node's cache file at `path`: one entry per dataset index, each
  // `entry_shape` float32 values (e.g. {S, H}).
  // create = true replaces any file at `path` with a new one (a process
  // still mapping the old one keeps it), allocates it (so a full /dev/shm
  // or disk fails here, not as SIGBUS on a later write; on tmpfs this
  // commits the whole cache's memory now) and writes the header, with all
  // entries empty. One process per node does this before the others open
  // it with create = false (the caller barriers in between). create = false
  // checks the header and throws ep::Error naming the file and the field
  // that does not match. The file is mode 0600: one user's processes share it.
  // `publish_wait`: how long read() waits for an entry that another process
  // has not written yet.
  ActivationCache(std::string path, std::int64_t dataset_size, std::vector<std::int64_t> entry_shape,
                  bool create, std::chrono::milliseconds publish_wait = std::chrono::seconds(30));
  ActivationCache(const ActivationCache&) = delete;
  ActivationCache& operator=(const ActivationCache&) = delete;
  // Stores what write() left pending, then unmaps; never deletes the file
  // (remove() does, for the creator).
  ~ActivationCache();

  // Entries for `indices` stacked on `device`: [n, entry_shape...]; a masked
  // slot (-1) reads zeros. An entry tagged below `depth` is waited for (all
  // of the call shares one publish_wait); then, or at once when its tag is
  // above `depth`, throws ep::Error naming the sample, the depth it holds
  // and the one expected. On a GPU the rows go there from pinned memory on
  // a side stream, ordered before the caller's current stream's next work.
  // Thread-safe.
  [[nodiscard]] at::Tensor read(const std::vector<std::int64_t>& indices, int depth, const at::Device& device);
  // The same rows on the host (in pinned memory: `pinned`), read ahead of
  // the iteration that needs them, or an undefined tensor, at once, where
  // any entry is not at `depth` (not written yet, a newer depth, a sample
  // out of range, a removed cache): that iteration's read() then waits or
  // fails as it should. Thread-safe.
  [[nodiscard]] at::Tensor read_ahead(const std::vector<std::int64_t>& indices, int depth, bool pinned);
  // Stores row k of `values` ([n, entry_shape...], any device, any floating
  // dtype, stored as float32) for every indices[k] >= 0, tagged `depth`.
  // Every index is checked first: a refused write changes no entry. From a
  // GPU the rows come through pinned memory, copied on a side stream after
  // the current stream's work so far.
  // behind = false: stored and published before write() returns.
  // behind = true: returns once the rows are queued (from a GPU, with an
  // event where the current stream makes them: the copy to pinned memory is
  // the store's); this cache's thread stores them and publishes their tags,
  // writes in call order, at most kCacheWritesInFlight (cache_policy.hpp)
  // pending. A reader of those entries waits for their tags as for another
  // process's. `values` must not change in place before flush() (its
  // memory is kept from reuse).
  // Thread-safe for distinct indices.
  void write(const std::vector<std::int64_t>& indices, const at::Tensor& values, int depth, bool behind = false);
  // Returns once every write so far is stored and published; rethrows what
  // failed the storing thread.
  void flush();
  // Asks the kernel to read these entries ahead (madvise(MADV_WILLNEED) on
  // their pages): the trainer passes the sampler's upcoming indices (the
  // prefetch window). Matters for the disk tier; masked slots are skipped.
  void prefetch(const std::vector<std::int64_t>& indices);
  // Unmaps and deletes the file; the cache is unusable afterwards.
  void remove();

  // Where the host's time went, summed since the cache was opened (read
  // and write run on the stage worker, the stores on this cache's thread):
  // what a GPU run's host side costs, against the device time the
  // simulator models for a cache read or write.
  struct HostTimes {
    std::int64_t reads = 0;  // read() calls
    double read_wait_s = 0;  // waiting for entries another process had not written yet
    double read_copy_s = 0;  // copying rows out of the file (into pinned memory for a GPU)
    std::int64_t writes = 0;  // write() calls
    double write_queue_s = 0;    // write() held for a place in the queue (kCacheWritesInFlight pending)
    double store_device_s = 0;   // the store bringing GPU rows to the host: a pinned block (made when none is free), the copy
    double store_copy_s = 0;     // copying rows into the file
    double flush_s = 0;          // flush() waiting for pending stores
  };
  [[nodiscard]] HostTimes host_times() const;

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::int64_t dataset_size() const { return dataset_size_; }
  [[nodiscard]] const std::vector<std::int64_t>& entry_shape() const { return entry_shape_; }
  // Bytes of one entry's values (E*4), without the row padding.
  [[nodiscard]] std::int64_t entry_bytes() const { return entry_numel_ * 4; }
  [[nodiscard]] std::int64_t file_bytes() const { return file_bytes_; }

 private:
  [[nodiscard]] std::string where() const;  // "activation cache <path>"
  void check_index(std::int64_t i) const;
  struct Writer;
  struct PendingWrite;
  void check_depths(const PendingWrite& w) const;
  [[nodiscard]] std::int64_t* tag(std::int64_t i) const;
  [[nodiscard]] char* row(std::int64_t i) const;
  [[nodiscard]] at::Tensor rows_to_host(const std::vector<std::int64_t>& indices, bool pinned);
  void unmap() noexcept;
  void check_existing(int fd) const;
  // Adds the time since `since` to `part` (and one to `count`); returns now.
  std::chrono::steady_clock::time_point add_time(double HostTimes::*part, std::chrono::steady_clock::time_point since,
                                                 std::int64_t HostTimes::*count = nullptr);

  std::string path_;
  std::int64_t dataset_size_;
  std::vector<std::int64_t> entry_shape_;
  std::int64_t entry_numel_ = 0;
  std::int64_t entry_stride_ = 0;
  std::int64_t data_offset_ = 0;
  std::int64_t file_bytes_ = 0;
  std::chrono::milliseconds publish_wait_;
  char* base_ = nullptr;  // the mapping, file_bytes_ long; null once removed
  mutable std::mutex times_mu_;
  HostTimes times_;
  std::unique_ptr<Writer> writer_;  // started with the mapping; stopped (pending writes stored) before unmapping
};

}  // namespace ep::exec
