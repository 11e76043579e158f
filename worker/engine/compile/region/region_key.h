// The structural identity of a compiled region: its kind plus the configuration values
// that change the code it runs, e.g. attention{dim=256,n_heads=8,n_kv_heads=4,tp=1}.
// Built only from values, never from object identity or addresses, so N identical
// layers produce equal keys and share one cache (the failure this prevents: guards on
// hook ids made every layer recompile). Immutable value type; thread-safe.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace trainyard::engine::compile {

class RegionKey {
 public:
  // One name=value pair. Numbers are formatted exactly (shortest round-trip form for
  // doubles), so two configs that differ in any bit differ in their keys.
  struct Field {
    template <typename Int, std::enable_if_t<std::is_integral_v<Int> &&
                                                 !std::is_same_v<Int, bool>, int> = 0>
    Field(std::string name, Int value) : name(std::move(name)), value(std::to_string(value)) {}
    Field(std::string name, double value);
    Field(std::string name, bool value);
    Field(std::string name, std::string value);
    Field(std::string name, const char* value) : Field(std::move(name), std::string(value)) {}

    std::string name;
    std::string value;
  };

  // Field order is kept as given: it is part of the key. Throws std::invalid_argument
  // on an empty kind or name, a duplicate name, or a kind/name/value containing one of
  // the separators "{}=,".
  RegionKey(std::string kind, std::vector<Field> fields);

  const std::string& kind() const { return kind_; }
  // The canonical form used in events and as the cache key.
  const std::string& str() const { return str_; }

  friend bool operator==(const RegionKey& a, const RegionKey& b) { return a.str_ == b.str_; }
  friend bool operator!=(const RegionKey& a, const RegionKey& b) { return !(a == b); }

 private:
  std::string kind_;
  std::string str_;
};

}  // namespace trainyard::engine::compile
