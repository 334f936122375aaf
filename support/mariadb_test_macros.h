// For GoogleTest files only: the first line of every test that needs a
// MariaDB server.
//
//   TEST(MariaDbDiff, FindsEveryDifference) {
//     TALLY_SKIP_UNLESS_MARIADB();
//     auto db = MariaDbServer::Start();
//
// Skips the test when MariaDB is not installed, and FAILS it instead when
// TALLY_REQUIRE_MARIADB=1 (scripts/test.sh, which CI runs, sets it), so
// that a CI machine without MariaDB never reads green.
#ifndef TALLY_SUPPORT_MARIADB_TEST_MACROS_H_
#define TALLY_SUPPORT_MARIADB_TEST_MACROS_H_

#include "gtest/gtest.h"
#include "support/mariadb_server.h"

#define TALLY_SKIP_UNLESS_MARIADB()                                 \
  do {                                                              \
    const ::absl::Status tally_mariadb_installed_ =                 \
        ::tally::testing::MariaDbInstalled();                       \
    if (!tally_mariadb_installed_.ok()) {                           \
      if (::tally::testing::MariaDbRequired()) {                    \
        FAIL() << "MariaDB is required (TALLY_REQUIRE_MARIADB=1): " \
               << tally_mariadb_installed_.message();               \
      }                                                             \
      GTEST_SKIP() << tally_mariadb_installed_.message();           \
    }                                                               \
  } while (false)

#endif  // TALLY_SUPPORT_MARIADB_TEST_MACROS_H_
