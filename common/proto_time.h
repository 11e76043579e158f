#pragma once

#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/time_util.h>

#include "absl/time/time.h"

namespace trainyard {

// An absl::Time as a protobuf Timestamp (protobuf's own conversion, which normalises
// times before the epoch too).
inline google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

// A protobuf Timestamp as an absl::Time.
inline absl::Time FromProtoTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

}  // namespace trainyard
