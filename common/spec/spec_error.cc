#include "common/spec/spec_error.h"

namespace trainyard::spec {

SpecError Invalid(std::string field, std::string rule, std::string message) {
  SpecError e;
  e.kind = SpecError::Kind::kInvalid;
  e.field = std::move(field);
  e.rule = std::move(rule);
  e.message = std::move(message);
  return e;
}

SpecError Unimplemented(std::string field, std::string message) {
  SpecError e;
  e.kind = SpecError::Kind::kUnimplemented;
  e.field = std::move(field);
  e.rule = "unimplemented";
  e.message = std::move(message);
  return e;
}

}  // namespace trainyard::spec
