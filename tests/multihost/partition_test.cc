// Partitions: the controller's link cut while ranks train, a controller killed while a
// worker is partitioned.
#include <gtest/gtest.h>

#include "tests/multihost/multihost_fixture.h"

namespace trainyard::testing {
namespace {}  // namespace
}  // namespace trainyard::testing
