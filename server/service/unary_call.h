// The pieces every unary JobService method is made of: finishing the call with a
// Status, the refusal of a role, and Serve (authenticate, parse, handle, serialize).
// Internal to server/service.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "server/auth/authorizer.h"
#include "server/service/wire_codec.h"

namespace trainyard {

// What a caller of `role` is refused with when the role does not allow `what`.
inline absl::Status Denied(const Caller& caller, const char* what, const char* needs) {
  return absl::PermissionDeniedError(absl::StrCat(caller.owner, " has the ", RoleName(caller.role),
                                                  " role, which cannot ", what, "; that needs ", needs));
}

inline grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A unary method over raw bytes: authenticate the caller, parse the request, run
// `handle(caller, request, &response)` and send the response when it succeeded.
template <class Request, class Response, class Handle>
grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, const Authorizer& authorizer,
                                const grpc::ByteBuffer* in, grpc::ByteBuffer* out, Handle handle) {
  auto caller = authorizer.Authenticate(*ctx);
  if (!caller.ok()) return Done(ctx, caller.status());
  Request request;
  if (auto s = ParseRequest(*in, &request); !s.ok()) return Done(ctx, s);
  Response response;
  absl::Status status = handle(*caller, request, &response);
  if (status.ok()) status = SerializeResponse(response, out);
  return Done(ctx, status);
}

}  // namespace trainyard
