#include "worker/engine/compile/region/region_key.h"

#include <charconv>
#include <stdexcept>
#include <unordered_set>

namespace trainyard::engine::compile {
namespace {

void CheckToken(const std::string& what, const std::string& token, bool allow_empty) {
  if (!allow_empty && token.empty()) throw std::invalid_argument("region key: empty " + what);
  if (token.find_first_of("{}=,") != std::string::npos) {
    throw std::invalid_argument("region key: " + what + " \"" + token +
                                "\" contains one of the separators {}=,");
  }
}

}  // namespace

RegionKey::Field::Field(std::string name, double value) : name(std::move(name)) {
  char buf[64];
  // Shortest representation that round-trips: 1e-06, 0.5, 10000.
  auto res = std::to_chars(buf, buf + sizeof(buf), value);
  this->value.assign(buf, res.ptr);
}

RegionKey::Field::Field(std::string name, bool value)
    : name(std::move(name)), value(value ? "true" : "false") {}

RegionKey::Field::Field(std::string name, std::string value)
    : name(std::move(name)), value(std::move(value)) {}

RegionKey::RegionKey(std::string kind, std::vector<Field> fields) : kind_(std::move(kind)) {
  CheckToken("kind", kind_, /*allow_empty=*/false);
  std::unordered_set<std::string> seen;
  str_ = kind_ + "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    CheckToken("field name", f.name, /*allow_empty=*/false);
    CheckToken("value of " + f.name, f.value, /*allow_empty=*/true);
    if (!seen.insert(f.name).second) {
      throw std::invalid_argument("region key " + kind_ + ": field " + f.name + " given twice");
    }
    if (i > 0) str_ += ',';
    str_ += f.name + "=" + f.value;
  }
  str_ += "}";
}

}  // namespace trainyard::engine::compile
