#include "planner/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "planner/json_input.hpp"

namespace ep {
namespace {

using nlohmann::json;

constexpr int kMaxDims = 16;

struct DtypeSize {
  const char* name;
  std::size_t bytes;
};
constexpr DtypeSize kDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},       {"F8_E4M3", 1}, {"F8_E5M2", 1},
                                 {"I16", 2},  {"U16", 2}, {"F16", 2},      {"BF16", 2},    {"I32", 4},
                                 {"U32", 4},  {"F32", 4}, {"F64", 8},      {"I64", 8},     {"U64", 8}};

std::string dtype_names() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : "|") + std::string(d.name);
  return out;
}

// A JSON value as a message shows it.
std::string shown(const json& v) { return printable(v.dump(), 60); }

[[noreturn]] void fail(const std::string& where, const std::string& expected, const std::string& found) {
  throw Error(where + ": expected " + expected + ", found " + found);
}

std::uint64_t read_u64_le(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const json& v,
                             std::uint64_t data_size) {
  if (!v.is_object()) fail(where, "an object {dtype, shape, data_offsets}", shown(v));
  for (const auto& [key, _] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(where, "only the keys dtype, shape and data_offsets", "key '" + printable(key) + "'");
  SafetensorsEntry e;
  e.name = name;
  const auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string()) fail(where, "a dtype string", dtype == v.end() ? "none" : shown(*dtype));
  e.dtype = dtype->get<std::string>();
  const std::size_t element = safetensors_dtype_bytes(e.dtype);
  if (element == 0) fail(where, "dtype " + dtype_names(), "'" + printable(e.dtype) + "'");
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array() || shape->size() > kMaxDims)
    fail(where, "a shape of at most " + std::to_string(kMaxDims) + " dimensions",
         shape == v.end() ? "none" : shown(*shape));
  // The product, checked as it grows so that it cannot overflow (the
  // offsets then say whether the file holds it).
  constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 62;
  std::uint64_t bytes = element;
  bool zero = false;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned()) fail(where, "dimensions that are integers >= 0", shown(*shape));
    const auto n = d.get<std::uint64_t>();
    zero = zero || n == 0;
    if (n > kMaxBytes || (n != 0 && bytes > kMaxBytes / n))
      fail(where, "a shape of at most 2^62 bytes", shown(*shape));
    e.shape.push_back(static_cast<std::int64_t>(n));
    bytes *= n == 0 ? 1 : n;
  }
  if (zero) bytes = 0;
  const auto offsets = v.find("data_offsets");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    fail(where, "data_offsets [begin, end], two integers >= 0", offsets == v.end() ? "none" : shown(*offsets));
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > data_size)
    fail(where, "data_offsets within the file's " + std::to_string(data_size) + " bytes of data", shown(*offsets));
  if (e.end - e.begin != bytes)
    fail(where, std::to_string(bytes) + " bytes (" + e.dtype + " of shape " + shown(*shape) + ")",
         std::to_string(e.end - e.begin) + " (data_offsets " + shown(*offsets) + ")");
  return e;
}

}  // namespace

std::uint64_t SafetensorsEntry::numel() const {
  std::uint64_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t safetensors_dtype_bytes(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.bytes;
  return 0;
}

SafetensorsHeader parse_safetensors_header(const std::string& path, const std::string& head, std::uint64_t file_size) {
  if (file_size < 8 || head.size() < 8)
    fail(path, "a safetensors file (8 bytes of header length, the JSON header, the data)",
         std::to_string(file_size) + " bytes");
  const std::uint64_t n = read_u64_le(reinterpret_cast<const unsigned char*>(head.data()));
  if (n < 2 || n > kMaxSafetensorsHeader || n > file_size - 8)
    fail(path + ": header length", "2 to " + std::to_string(std::min<std::uint64_t>(kMaxSafetensorsHeader, file_size - 8)) +
                                       " bytes (at most 100 MB, within the file's " + std::to_string(file_size) + ")",
         std::to_string(n));
  if (head.size() < 8 + n) fail(path, std::to_string(8 + n) + " bytes of header", std::to_string(head.size()));
  const std::string text = head.substr(8, n);
  if (text[0] != '{') fail(path + ": header", "a JSON object starting with '{'", "'" + printable(text, 20) + "'");
  std::set<std::string> names;
  const auto unique = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      throw Error(path + ": tensor '" + printable(parsed.get<std::string>()) + "': expected one entry, found two");
    return true;
  };
  const json root = parse_json(text, path + ": header", unique);
  if (!root.is_object()) fail(path + ": header", "a JSON object", shown(root));

  SafetensorsHeader h;
  h.path = path;
  h.data_start = 8 + n;
  const std::uint64_t data_size = file_size - h.data_start;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path + ": __metadata__", "an object of strings", shown(value));
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(path + ": __metadata__ '" + printable(k) + "'", "a string", shown(v));
        h.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(parse_entry(path + ": tensor '" + printable(name) + "'", name, value, data_size));
  }
  // The data is covered exactly, in the entries' order: no hole (a polyglot
  // file), no overlap (two tensors sharing bytes), nothing after the last.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != at)
      fail(path + ": tensor '" + printable(t.name) + "'",
           "data starting at byte " + std::to_string(at) + " (right after the previous tensor's)",
           "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]");
    at = t.end;
  }
  if (at != data_size)
    fail(path, std::to_string(at) + " bytes of data after the header (the tensors' data)",
         std::to_string(data_size));
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  // A checkpoint holds at most a few hundred GB; the header at most 100 MB.
  constexpr InputFormat kFormat{"safetensors file", std::int64_t{1} << 40, "a checkpoint of at most 1 TiB"};
  InputFile in(path, kFormat);
  const auto size = static_cast<std::uint64_t>(in.size());
  std::string head(std::min<std::uint64_t>(size, 8), '\0');
  in.read_exactly(head.data(), head.size());
  if (size >= 8) {
    const std::uint64_t n = read_u64_le(reinterpret_cast<const unsigned char*>(head.data()));
    if (n <= kMaxSafetensorsHeader && n <= size - 8) {
      head.resize(8 + n);
      in.read_exactly(head.data() + 8, n);
    }
  }
  return parse_safetensors_header(path, head, size);
}

std::string safetensors_header_bytes(const std::vector<SafetensorsEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  json root = json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  std::uint64_t at = 0;
  for (const auto& t : tensors) {
    if (t.begin != at || t.end < t.begin)
      throw Error("safetensors: tensor '" + t.name + "': expected data from byte " + std::to_string(at) +
                  ", found [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]");
    root[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    at = t.end;
  }
  std::string text = root.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + text;
}

}  // namespace ep
