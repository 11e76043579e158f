#include "worker/engine/io/safetensors_header.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

namespace trainyard::engine {
namespace {

// At most ~100 characters of a value read from a file, for error messages.
std::string Short(const std::string& s) { return s.size() <= 100 ? s : s.substr(0, 100) + "..."; }

struct DtypeInfo {
  const char* name;
  SafetensorsDtype type;
  std::size_t itemsize;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", SafetensorsDtype::kF64, 8},   {"F32", SafetensorsDtype::kF32, 4}, {"F16", SafetensorsDtype::kF16, 2},
    {"BF16", SafetensorsDtype::kBF16, 2}, {"I64", SafetensorsDtype::kI64, 8}, {"I32", SafetensorsDtype::kI32, 4},
    {"I16", SafetensorsDtype::kI16, 2},   {"I8", SafetensorsDtype::kI8, 1},   {"U8", SafetensorsDtype::kU8, 1},
    {"BOOL", SafetensorsDtype::kBool, 1},
};

const DtypeInfo* DtypeByName(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo& Info(SafetensorsDtype type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return d;
  }
  throw std::logic_error("safetensors: unknown SafetensorsDtype " + std::to_string(static_cast<int>(type)));
}

std::uint64_t NonNegativeInt(const nlohmann::json& v, const std::string& path, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  FailSafetensors(path, what + ": expected a non-negative integer, got " + Short(v.dump()));
}

// Parses the header JSON; duplicate top-level names are an error (nlohmann would
// silently keep the last one).
nlohmann::json ParseJson(const std::string& text, const std::string& path) {
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
    FailSafetensors(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) FailSafetensors(path, "duplicate tensor name \"" + duplicate + "\" in header");
  if (!header.is_object()) {
    FailSafetensors(path, "header must be a JSON object, got " + std::string(header.type_name()));
  }
  return header;
}

std::vector<SafetensorsHeaderEntry> ParseEntries(const nlohmann::json& header, const std::string& path) {
  std::vector<SafetensorsHeaderEntry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) FailSafetensors(path, "__metadata__ must be an object of strings");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          FailSafetensors(path, "__metadata__." + Short(key) + ": expected a string, got " + Short(value.dump()));
        }
      }
      continue;
    }
    const std::string where = "tensor \"" + Short(name) + "\"";
    if (!info.is_object()) FailSafetensors(path, where + ": expected an object, got " + Short(info.dump()));
    SafetensorsHeaderEntry e;
    e.name = name;
    auto dtype = info.find("dtype");
    if (dtype == info.end() || !dtype->is_string()) FailSafetensors(path, where + ": missing dtype");
    const DtypeInfo* dtype_info = DtypeByName(dtype->get<std::string>());
    if (dtype_info == nullptr) {
      FailSafetensors(path, where + ": unsupported dtype \"" + dtype->get<std::string>() +
                                "\" (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
    }
    e.dtype = dtype_info->type;
    auto shape = info.find("shape");
    if (shape == info.end() || !shape->is_array()) FailSafetensors(path, where + ": missing shape");
    std::uint64_t bytes = dtype_info->itemsize;
    for (const auto& d : *shape) {
      const std::uint64_t dim = NonNegativeInt(d, path, where + " shape");
      if (dim > static_cast<std::uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, dim, &bytes)) {
        FailSafetensors(path, where + ": shape " + shape->dump() + " is too large");
      }
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    auto offsets = info.find("data_offsets");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2) {
      FailSafetensors(path, where + ": data_offsets must be [begin, end]");
    }
    e.begin = NonNegativeInt((*offsets)[0], path, where + " data_offsets");
    e.end = NonNegativeInt((*offsets)[1], path, where + " data_offsets");
    if (e.end < e.begin) FailSafetensors(path, where + ": data_offsets " + offsets->dump() + " end before begin");
    if (e.end - e.begin != bytes) {
      FailSafetensors(path, where + ": data_offsets " + offsets->dump() + " span " +
                                std::to_string(e.end - e.begin) + " bytes but shape " + shape->dump() + " x " +
                                dtype_info->name + " needs " + std::to_string(bytes));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// The offsets must tile [0, buffer_bytes) exactly: no gaps, overlaps or trailing bytes.
void CheckTiling(std::vector<SafetensorsHeaderEntry>& entries, std::uint64_t buffer_bytes,
                 const std::string& path) {
  std::sort(entries.begin(), entries.end(), [](const SafetensorsHeaderEntry& a, const SafetensorsHeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (const SafetensorsHeaderEntry& e : entries) {
    if (e.end > buffer_bytes) {
      FailSafetensors(path, "tensor \"" + e.name + "\": data_offsets [" + std::to_string(e.begin) + "," +
                                std::to_string(e.end) + "] out of range: data buffer is " +
                                std::to_string(buffer_bytes) + " bytes");
    }
    if (e.begin != expected) {
      FailSafetensors(path, "tensor \"" + e.name + "\": data_offsets not contiguous: begins at " +
                                std::to_string(e.begin) + ", expected " + std::to_string(expected) +
                                (e.begin < expected ? " (overlaps the previous tensor)" : " (gap)"));
    }
    expected = e.end;
  }
  if (expected != buffer_bytes) {
    FailSafetensors(path, "data buffer is " + std::to_string(buffer_bytes) + " bytes but the tensors cover " +
                              std::to_string(expected) + " (trailing bytes)");
  }
}

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) { return Info(dtype).name; }
std::size_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Info(dtype).itemsize; }

void FailSafetensors(const std::string& path, const std::string& problem) {
  throw std::runtime_error("safetensors " + path + ": " + problem);
}

std::uint64_t SafetensorsHeaderLength(const unsigned char (&len_bytes)[8], std::uint64_t file_bytes,
                                      const std::string& path) {
  if (file_bytes < 8) {
    FailSafetensors(path, "truncated: file is " + std::to_string(file_bytes) +
                              " bytes, shorter than the 8-byte header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeaderBytes) {
    FailSafetensors(path, "header length " + std::to_string(n) + " exceeds the cap of " +
                              std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > file_bytes - 8) {
    FailSafetensors(path, "truncated header: header length " + std::to_string(n) + " but only " +
                              std::to_string(file_bytes - 8) + " bytes follow");
  }
  return n;
}

ParsedSafetensorsHeader ParseSafetensorsHeader(const std::string& text, std::uint64_t buffer_bytes,
                                               const std::string& path) {
  const nlohmann::json header = ParseJson(text, path);
  ParsedSafetensorsHeader out;
  out.tensors = ParseEntries(header, path);
  CheckTiling(out.tensors, buffer_bytes, path);
  auto meta = header.find("__metadata__");
  if (meta != header.end()) {
    for (const auto& [key, value] : meta->items()) out.metadata[key] = value.get<std::string>();
  }
  return out;
}

}  // namespace trainyard::engine
