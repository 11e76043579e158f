#include "worker/engine/io/safetensors_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace trainyard::engine {
namespace {

// At most ~100 characters of a value read from a file, for error messages.
std::string Short(const std::string& s) { return s.size() <= 100 ? s : s.substr(0, 100) + "..."; }

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors is little-endian; this code copies raw bytes");

struct DtypeInfo {
  const char* name;
  c10::ScalarType type;
  std::size_t itemsize;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", c10::kDouble, 8}, {"F32", c10::kFloat, 4},  {"F16", c10::kHalf, 2},
    {"BF16", c10::kBFloat16, 2}, {"I64", c10::kLong, 8}, {"I32", c10::kInt, 4},
    {"I16", c10::kShort, 2},  {"I8", c10::kChar, 1},    {"U8", c10::kByte, 1},
    {"BOOL", c10::kBool, 1},
};

const DtypeInfo* DtypeByName(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* DtypeByType(c10::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

[[noreturn]] void Fail(const std::string& path, const std::string& problem) {
  throw std::runtime_error("safetensors " + path + ": " + problem);
}

std::string Errno() { return std::strerror(errno); }

// Closes the descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

void WriteAll(int fd, const void* data, std::size_t n, const std::string& where) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Fail(where, "write failed: " + Errno());
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void ReadAllAt(int fd, void* data, std::size_t n, std::uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) Fail(path, "read failed: " + Errno());
    if (r == 0) Fail(path, "file ended early (truncated while reading?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

std::uint64_t NonNegativeInt(const nlohmann::json& v, const std::string& path,
                             const std::string& what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  Fail(path, what + ": expected a non-negative integer, got " + Short(v.dump()));
}

struct Entry {
  std::string name;
  const DtypeInfo* dtype;
  std::vector<int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

// Parses the header JSON; duplicate top-level names are an error (nlohmann would
// silently keep the last one).
nlohmann::json ParseHeader(const std::string& text, const std::string& path) {
  std::set<std::string> names;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string name = parsed.get<std::string>();
      if (!names.insert(name).second && duplicate.empty()) duplicate = name;
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {
    Fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) Fail(path, "duplicate tensor name \"" + duplicate + "\" in header");
  if (!header.is_object()) Fail(path, "header must be a JSON object, got " + std::string(header.type_name()));
  return header;
}

std::vector<Entry> ParseEntries(const nlohmann::json& header, const std::string& path) {
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) Fail(path, "__metadata__ must be an object of strings");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) Fail(path, "__metadata__." + Short(key) + ": expected a string, got " + Short(value.dump()));
      }
      continue;
    }
    const std::string where = "tensor \"" + Short(name) + "\"";
    if (!info.is_object()) Fail(path, where + ": expected an object, got " + Short(info.dump()));
    Entry e;
    e.name = name;
    auto dtype = info.find("dtype");
    if (dtype == info.end() || !dtype->is_string()) Fail(path, where + ": missing dtype");
    e.dtype = DtypeByName(dtype->get<std::string>());
    if (e.dtype == nullptr) {
      Fail(path, where + ": unsupported dtype \"" + dtype->get<std::string>() +
                     "\" (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
    }
    auto shape = info.find("shape");
    if (shape == info.end() || !shape->is_array()) Fail(path, where + ": missing shape");
    std::uint64_t bytes = e.dtype->itemsize;
    for (const auto& d : *shape) {
      const std::uint64_t dim = NonNegativeInt(d, path, where + " shape");
      if (dim > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, dim, &bytes)) {
        Fail(path, where + ": shape " + shape->dump() + " is too large");
      }
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    auto offsets = info.find("data_offsets");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2) {
      Fail(path, where + ": data_offsets must be [begin, end]");
    }
    e.begin = NonNegativeInt((*offsets)[0], path, where + " data_offsets");
    e.end = NonNegativeInt((*offsets)[1], path, where + " data_offsets");
    if (e.end < e.begin) Fail(path, where + ": data_offsets " + offsets->dump() + " end before begin");
    if (e.end - e.begin != bytes) {
      Fail(path, where + ": data_offsets " + offsets->dump() + " span " + std::to_string(e.end - e.begin) +
                     " bytes but shape " + shape->dump() + " x " + e.dtype->name + " needs " +
                     std::to_string(bytes));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// The offsets must tile [0, buffer_bytes) exactly: no gaps, overlaps or trailing bytes.
void CheckTiling(std::vector<Entry>& entries, std::uint64_t buffer_bytes, const std::string& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.end > buffer_bytes) {
      Fail(path, "tensor \"" + e.name + "\": data_offsets [" + std::to_string(e.begin) + "," +
                     std::to_string(e.end) + "] out of range: data buffer is " +
                     std::to_string(buffer_bytes) + " bytes");
    }
    if (e.begin != expected) {
      Fail(path, "tensor \"" + e.name + "\": data_offsets not contiguous: begins at " +
                     std::to_string(e.begin) + ", expected " + std::to_string(expected) +
                     (e.begin < expected ? " (overlaps the previous tensor)" : " (gap)"));
    }
    expected = e.end;
  }
  if (expected != buffer_bytes) {
    Fail(path, "data buffer is " + std::to_string(buffer_bytes) + " bytes but the tensors cover " +
                   std::to_string(expected) + " (trailing bytes)");
  }
}

}  // namespace

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  WriteSafetensors(path, tensors, SafetensorsWriteOptions{});
}

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const SafetensorsWriteOptions& options) {
  // Validate and lay out everything before touching the filesystem.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<torch::Tensor> data;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") Fail(path, "invalid tensor name \"" + name + "\"");
    if (!names.insert(name).second) Fail(path, "duplicate tensor name \"" + name + "\"");
    if (!tensor.defined()) Fail(path, "tensor \"" + name + "\" is undefined");
    if (!tensor.device().is_cpu()) Fail(path, "tensor \"" + name + "\" is not on the CPU");
    const DtypeInfo* dtype = DtypeByType(tensor.scalar_type());
    if (dtype == nullptr) {
      Fail(path, "tensor \"" + name + "\": unsupported dtype " + std::string(c10::toString(tensor.scalar_type())));
    }
    torch::Tensor t = tensor.detach().contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * dtype->itemsize;
    header[name] = {{"dtype", dtype->name},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [key, value] : options.metadata) header["__metadata__"][key] = value;
  std::string header_text = header.dump();
  // Pad with spaces so the buffer starts 8-byte aligned, as the reference writer does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const std::uint64_t n = header_text.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));

  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) Fail(path, "cannot create " + tmp + ": " + Errno());
  try {
    WriteAll(fd.get(), len_bytes, sizeof(len_bytes), path);
    WriteAll(fd.get(), header_text.data(), header_text.size(), path);
    for (std::size_t i = 0; i < data.size(); ++i) {
      WriteAll(fd.get(), data[i].data_ptr(), static_cast<std::size_t>(data[i].nbytes()), path);
      if (i == 0 && options.after_first_tensor) options.after_first_tensor();
    }
    if (::fsync(fd.get()) != 0) Fail(path, "fsync failed: " + Errno());
    if (::close(fd.release()) != 0) Fail(path, "close failed: " + Errno());
    if (::rename(tmp.c_str(), path.c_str()) != 0) Fail(path, "rename from " + tmp + " failed: " + Errno());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable.
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0 || ::fsync(dir_fd.get()) != 0) Fail(path, "fsync of its directory " + dir + " failed: " + Errno());
}

const SafetensorsEntry* SafetensorsHeader::Find(const std::string& name) const {
  for (const auto& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

SafetensorsHeader ReadSafetensorsHeader(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) Fail(path, "cannot open: " + Errno());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) Fail(path, "cannot stat: " + Errno());
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    Fail(path, "truncated: file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  }
  unsigned char len_bytes[8];
  ReadAllAt(fd.get(), len_bytes, 8, 0, path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeaderBytes) {
    Fail(path, "header length " + std::to_string(n) + " exceeds the cap of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > file_size - 8) {
    Fail(path, "truncated header: header length " + std::to_string(n) + " but only " +
                   std::to_string(file_size - 8) + " bytes follow");
  }
  std::string header_text(n, '\0');
  ReadAllAt(fd.get(), header_text.data(), n, 8, path);
  const nlohmann::json header = ParseHeader(header_text, path);
  std::vector<Entry> entries = ParseEntries(header, path);
  SafetensorsHeader out;
  out.path = path;
  out.file_bytes = file_size;
  out.buffer_start = 8 + n;
  CheckTiling(entries, file_size - out.buffer_start, path);
  for (const Entry& e : entries) out.tensors.push_back({e.name, e.dtype->type, e.shape, e.begin, e.end});
  auto meta = header.find("__metadata__");
  if (meta != header.end()) {
    for (const auto& [key, value] : meta->items()) out.metadata[key] = value.get<std::string>();
  }
  return out;
}

torch::Tensor ReadSafetensorsTensor(const SafetensorsHeader& header, const std::string& name) {
  const SafetensorsEntry* e = header.Find(name);
  if (e == nullptr) Fail(header.path, "no tensor \"" + name.substr(0, 100) + "\"");
  Fd fd(::open(header.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) Fail(header.path, "cannot open: " + Errno());
  torch::Tensor t = torch::empty(e->shape, torch::TensorOptions().dtype(e->dtype));
  ReadAllAt(fd.get(), t.data_ptr(), static_cast<std::size_t>(e->end - e->begin), header.buffer_start + e->begin,
            header.path);
  if (e->dtype == c10::kBool && t.numel() > 0 && t.view(c10::kByte).gt(1).any().item<bool>()) {
    Fail(header.path, "tensor \"" + e->name + "\": BOOL data holds bytes other than 0 and 1");
  }
  return t;
}

std::vector<std::pair<std::string, torch::Tensor>> ReadSafetensors(const std::string& path) {
  const SafetensorsHeader header = ReadSafetensorsHeader(path);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.reserve(header.tensors.size());
  for (const SafetensorsEntry& e : header.tensors) out.emplace_back(e.name, ReadSafetensorsTensor(header, e.name));
  return out;
}

}  // namespace trainyard::engine
