// The word for a toml++ node's type in error messages ("expected an integer, got
// string"), for every reader of TOML files: job files (toml_reader.cc) and the
// controller's policy file (server/policy/policy_file.cc). Include only where toml++ is.
#pragma once

#include <toml++/toml.h>

namespace trainyard::spec {

inline const char* TomlTypeName(toml::node_type type) {
  switch (type) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

}  // namespace trainyard::spec
