#pragma once

// Abseil 20220623 ships no status macros; these are the project's only copies.
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TY_CONCAT_INNER_(a, b) a##b
#define TY_CONCAT_(a, b) TY_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the current function when it is not OK.
#define TY_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::absl::Status ty_status_ = (expr);           \
    if (!ty_status_.ok()) return ty_status_;      \
  } while (0)

// `TY_ASSIGN_OR_RETURN(auto x, F());` binds the value of a StatusOr or returns its error.
#define TY_ASSIGN_OR_RETURN(lhs, expr) \
  TY_ASSIGN_OR_RETURN_IMPL_(TY_CONCAT_(ty_statusor_, __LINE__), lhs, expr)
#define TY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
