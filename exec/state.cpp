#include "exec/state.hpp"

#include "exec/crc32.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <zlib.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <map>

#include "planner/error.hpp"
#include "planner/json_input.hpp"

namespace ep::exec {
namespace {

// Integers and floats are written as the host holds them.
static_assert(std::endian::native == std::endian::little,
              "the EPSTATE1 format is written in host byte order, assumed little-endian");

constexpr char kMagic[8] = {'E', 'P', 'S', 'T', 'A', 'T', 'E', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint8_t kFloat32 = 0;
enum Kind : std::uint8_t { kWeight = 0, kMomentum = 1, kSecondMoment = 2 };
constexpr const char* kKindNames[] = {"weight", "momentum", "second moment"};
// Sanity bounds, so a corrupted length fails cleanly instead of allocating.
constexpr std::uint32_t kMaxName = 4096, kMaxDims = 8;
// magic, version, meta length, record count, CRC.
constexpr std::size_t kMinSize = sizeof kMagic + 4 + 8 + 8 + 4;

std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// One record to write; the tensor is copied to the CPU only when written,
// so packing holds one parameter's host copy at a time besides the buffer.
struct OutRecord {
  const std::string* name;
  Kind kind;
  std::int64_t step;
  at::Tensor tensor;
};

class Writer {
 public:
  explicit Writer(std::size_t size) { out_.reserve(size); }
  template <class T>
  void put(T v) {
    bytes(&v, sizeof v);
  }
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<std::uint8_t>& out() { return out_; }

 private:
  std::vector<std::uint8_t> out_;
};

// Bounds-checked reading; running out of bytes is "truncated or corrupted"
// since a damaged length field reads the same as a short buffer.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> bytes, const std::string& what) : b_(bytes), what_(what) {}
  template <class T>
  T get(const std::string& field) {
    T v;
    std::memcpy(&v, take(sizeof v, field), sizeof v);
    return v;
  }
  const std::uint8_t* take(std::uint64_t n, const std::string& field) {
    if (n > remaining())
      throw Error(what_ + ": truncated or corrupted: " + field + ": needs " + std::to_string(n) +
                  " bytes at offset " + std::to_string(pos_) + ", " + std::to_string(remaining()) + " remain");
    const std::uint8_t* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  [[nodiscard]] std::size_t remaining() const { return b_.size() - pos_; }
  [[nodiscard]] std::size_t pos() const { return pos_; }

 private:
  std::span<const std::uint8_t> b_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

struct InRecord {
  std::string name;
  std::uint8_t kind;
  std::int64_t step;
  std::uint8_t dtype;
  std::vector<std::int64_t> dims;
  std::span<const std::uint8_t> data;
};

// Walks the body (everything before the CRC) from just after the version:
// returns the meta text and hands each record to `on_record`. Checks
// structure only; the caller judges names, kinds and shapes.
template <class OnRecord>
std::string_view walk(Reader& r, const std::string& what, OnRecord&& on_record) {
  const auto meta_len = r.get<std::uint64_t>("the meta length");
  const auto* meta = r.take(meta_len, "the meta JSON");
  const auto count = r.get<std::uint64_t>("the record count");
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string at = "record " + std::to_string(i);
    InRecord rec;
    const auto len = r.get<std::uint32_t>(at);
    if (len > kMaxName) throw Error(what + ": corrupted: " + at + ": name length " + std::to_string(len));
    const auto* name = r.take(len, at + " name");
    rec.name.assign(reinterpret_cast<const char*>(name), len);
    const std::string of = at + " ('" + rec.name + "')";
    rec.kind = r.get<std::uint8_t>(of);
    rec.step = r.get<std::int64_t>(of);
    rec.dtype = r.get<std::uint8_t>(of);
    const auto ndim = r.get<std::uint32_t>(of);
    if (ndim > kMaxDims) throw Error(what + ": corrupted: " + of + ": " + std::to_string(ndim) + " dimensions");
    rec.dims.resize(ndim);
    std::memcpy(rec.dims.data(), r.take(std::uint64_t{ndim} * sizeof(std::int64_t), of + " shape"),
                ndim * sizeof(std::int64_t));
    const auto nbytes = r.get<std::uint64_t>(of);
    rec.data = {r.take(nbytes, of + " values"), nbytes};
    on_record(std::move(rec));
  }
  if (r.remaining() != 0)
    throw Error(what + ": corrupted: " + std::to_string(r.remaining()) +
                " unexpected bytes after the last record");
  return {reinterpret_cast<const char*>(meta), meta_len};
}

// Magic, CRC and version; returns a reader over the body, positioned after
// the version. The CRC is checked before the version so that any damaged
// byte past the magic reads as corruption.
Reader open(std::span<const std::uint8_t> bytes, const std::string& what) {
  const std::size_t head = std::min(bytes.size(), sizeof kMagic);
  if (head > 0 && std::memcmp(bytes.data(), kMagic, head) != 0)  // data() may be null when empty
    throw Error(what + ": not an ElasticPipe training state (expected magic EPSTATE1)");
  if (bytes.size() < kMinSize)
    throw Error(what + ": truncated: " + std::to_string(bytes.size()) + " bytes, a state has at least " +
                std::to_string(kMinSize));
  const auto body = bytes.first(bytes.size() - 4);
  std::uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof stored);
  const std::uint32_t computed = crc32_of(body.data(), body.size());
  if (stored != computed) {
    // Tell a short buffer from damage where the structure can say so.
    Reader probe(body, what);
    probe.take(sizeof kMagic + 4, "the header");
    try {
      walk(probe, what, [](InRecord&&) {});
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.starts_with(what + ": truncated")) throw;
    }
    throw Error(what + ": corrupted: CRC-32 mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
                " over " + std::to_string(body.size()) + " bytes)");
  }
  Reader r(body, what);
  r.take(sizeof kMagic, "the magic");
  const auto version = r.get<std::uint32_t>("the version");
  if (version != kVersion)
    throw Error(what + ": unsupported state version " + std::to_string(version) + " (this build reads " +
                std::to_string(kVersion) + ")");
  return r;
}

nlohmann::json parse_meta(std::string_view text, const std::string& what) {
  return parse_json(text, what + ": meta");
}

std::string shape_str(at::IntArrayRef dims) { return c10::str(dims); }

}  // namespace

std::vector<std::uint8_t> pack_state(const Model& model, const Optimizer& optimizer, const nlohmann::json& meta) {
  std::string meta_text;
  try {
    meta_text = meta.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("pack_state: meta: ") + e.what());
  }
  const std::vector<NamedTensor> params = model.named_params();
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& p : params) by_name.emplace(p.name, &p.tensor);
  for (const auto& [name, s] : optimizer.state())
    if (!by_name.count(name))
      throw Error("pack_state: the optimizer has state for '" + name + "', which is not a model parameter");

  std::vector<OutRecord> records;
  for (const auto& p : params) {
    const auto it = optimizer.state().find(p.name);
    const std::int64_t step = it == optimizer.state().end() ? -1 : it->second.step;
    records.push_back({&p.name, kWeight, step, p.tensor});
    if (it == optimizer.state().end()) continue;
    if (it->second.momentum.defined()) records.push_back({&p.name, kMomentum, step, it->second.momentum});
    if (it->second.second_moment.defined())
      records.push_back({&p.name, kSecondMoment, step, it->second.second_moment});
  }
  std::size_t size = kMinSize + meta_text.size();
  for (const auto& r : records) {
    if (r.tensor.scalar_type() != at::kFloat)
      throw Error("pack_state: '" + *r.name + "' (" + kKindNames[r.kind] + ") is " +
                  std::string(c10::toString(r.tensor.scalar_type())) + "; only float32 is supported");
    size += 4 + r.name->size() + 1 + 8 + 1 + 4 + 8 * r.tensor.dim() + 8 + r.tensor.numel() * sizeof(float);
  }

  Writer w(size);
  w.bytes(kMagic, sizeof kMagic);
  w.put(kVersion);
  w.put(static_cast<std::uint64_t>(meta_text.size()));
  w.bytes(meta_text.data(), meta_text.size());
  w.put(static_cast<std::uint64_t>(records.size()));
  for (const auto& r : records) {
    const at::Tensor t = r.tensor.detach().to(at::kCPU).contiguous();
    w.put(static_cast<std::uint32_t>(r.name->size()));
    w.bytes(r.name->data(), r.name->size());
    w.put(static_cast<std::uint8_t>(r.kind));
    w.put(r.step);
    w.put(kFloat32);
    w.put(static_cast<std::uint32_t>(t.dim()));
    w.bytes(t.sizes().data(), t.dim() * sizeof(std::int64_t));
    const std::uint64_t nbytes = t.numel() * sizeof(float);
    w.put(nbytes);
    w.bytes(t.data_ptr<float>(), nbytes);
  }
  w.put(crc32_of(w.out().data(), w.out().size()));
  return std::move(w.out());
}

nlohmann::json unpack_state(std::span<const std::uint8_t> bytes, Model& model, Optimizer& optimizer,
                            const std::string& what) {
  Reader r = open(bytes, what);
  const std::vector<NamedTensor> params = model.named_params();
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& p : params) by_name.emplace(p.name, &p.tensor);

  // Everything is staged on the CPU and checked before the model or the
  // optimizer is touched.
  struct Staged {
    std::int64_t step = -1;  // from the weight record; -1: not in the optimizer
    at::Tensor value;
    std::int64_t state_step = -1;  // from the momentum/second-moment records
    at::Tensor state[2];
  };
  std::map<std::string, Staged> staged;
  const std::string_view meta_text = walk(r, what, [&](InRecord&& rec) {
      const auto it = by_name.find(rec.name);
      if (it == by_name.end())
        throw Error(what + ": unknown parameter '" + rec.name + "': in the state, not in this model");
      if (rec.kind > kSecondMoment)
        throw Error(what + ": corrupted: '" + rec.name + "': record kind " + std::to_string(rec.kind));
      const std::string of = "parameter '" + rec.name + "' (" + kKindNames[rec.kind] + ")";
      if (rec.dtype != kFloat32)
        throw Error(what + ": " + of + ": dtype code " + std::to_string(rec.dtype) +
                    "; only float32 (0) is supported");
      const at::IntArrayRef expected = it->second->sizes();
      if (at::IntArrayRef(rec.dims) != expected)
        throw Error(what + ": " + of + ": shape mismatch: expected " + shape_str(expected) + " (the model's), found " +
                    shape_str(rec.dims));
      // Shape equals the model's, so numel cannot overflow here.
      std::uint64_t numel = 1;
      for (const std::int64_t d : rec.dims) numel *= static_cast<std::uint64_t>(d);
      if (rec.data.size() != numel * sizeof(float))
        throw Error(what + ": corrupted: " + of + ": " + std::to_string(rec.data.size()) + " bytes for shape " +
                    shape_str(rec.dims));
      Staged& s = staged[rec.name];
      at::Tensor& slot = rec.kind == kWeight ? s.value : s.state[rec.kind - 1];
      if (slot.defined()) throw Error(what + ": corrupted: " + of + " appears twice");
      slot = at::empty(rec.dims, at::kFloat);
      std::memcpy(slot.data_ptr<float>(), rec.data.data(), rec.data.size());
      const bool bad_step = rec.kind == kWeight ? rec.step < -1
                                                : rec.step < 0 || (s.state_step >= 0 && s.state_step != rec.step);
      if (bad_step) throw Error(what + ": corrupted: " + of + ": step " + std::to_string(rec.step));
      (rec.kind == kWeight ? s.step : s.state_step) = rec.step;
  });
  for (const auto& p : params) {
    const auto it = staged.find(p.name);
    if (it == staged.end() || !it->second.value.defined())
      throw Error(what + ": missing parameter '" + p.name + "': in this model, not in the state");
    const Staged& s = it->second;
    if ((s.state[0].defined() || s.state[1].defined()) && s.state_step != s.step)
      throw Error(what + ": corrupted: parameter '" + p.name + "': optimizer state at step " +
                  std::to_string(s.state_step) + ", the weight record says " + std::to_string(s.step));
  }
  nlohmann::json meta = parse_meta(meta_text, what);

  {
    c10::NoGradGuard no_grad;
    for (const auto& p : params) {
      at::Tensor param = p.tensor;
      param.copy_(staged.at(p.name).value);
    }
  }
  // Replace, not merge: entries the state does not have (frozen there, or
  // stale names) leave the optimizer.
  std::vector<std::string> drop;
  for (const auto& [name, unused] : optimizer.state()) {
    const auto it = staged.find(name);
    if (it == staged.end() || it->second.step < 0) drop.push_back(name);
  }
  for (const auto& name : drop) optimizer.remove(name);
  for (const auto& p : params) {
    Staged& s = staged.at(p.name);
    if (s.step < 0) continue;
    ParamState st;
    st.step = s.step;
    const at::Device device = p.tensor.device();
    if (s.state[0].defined()) st.momentum = s.state[0].to(device);
    if (s.state[1].defined()) st.second_moment = s.state[1].to(device);
    optimizer.set_state(p.name, std::move(st));
  }
  return meta;
}

std::int64_t max_state_bytes(const Model& model) {
  // The run state grows with the iterations (a loss each): a gigabyte holds
  // tens of millions of them.
  constexpr std::int64_t kMaxMetaBytes = std::int64_t{1} << 30;
  std::int64_t bytes = kMinSize + kMaxMetaBytes;
  for (const auto& p : model.named_params()) {
    const std::int64_t record = 4 + static_cast<std::int64_t>(p.name.size()) + 1 + 8 + 1 + 4 + 8 * p.tensor.dim() + 8;
    bytes += 3 * (record + p.tensor.numel() * static_cast<std::int64_t>(sizeof(float)));  // weight and two moments
  }
  return bytes;
}

nlohmann::json peek_meta(std::span<const std::uint8_t> bytes, const std::string& what) {
  Reader r = open(bytes, what);
  const std::string_view meta_text = walk(r, what, [](InRecord&&) {});
  return parse_meta(meta_text, what);
}

}  // namespace ep::exec
