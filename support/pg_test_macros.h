// For GoogleTest files only (the support library itself links no test
// framework): the first line of every test that needs a PostgreSQL server.
//
//   TEST(Capture, Inserts) {
//     TALLY_SKIP_UNLESS_POSTGRES();
//     auto pg = PgCluster::Start();
//
// Skips the test when PostgreSQL 15 is not installed, and FAILS it instead
// when TALLY_REQUIRE_POSTGRES=1 (scripts/test.sh, which CI runs, sets it), so
// that a CI machine without PostgreSQL never reads green.
#ifndef TALLY_SUPPORT_PG_TEST_MACROS_H_
#define TALLY_SUPPORT_PG_TEST_MACROS_H_

#include "gtest/gtest.h"
#include "support/pg_cluster.h"

#define TALLY_SKIP_UNLESS_POSTGRES()                                    \
  do {                                                                  \
    const ::absl::Status tally_pg_installed_ =                          \
        ::tally::testing::PostgresInstalled();                          \
    if (!tally_pg_installed_.ok()) {                                    \
      if (::tally::testing::PostgresRequired()) {                       \
        FAIL() << "PostgreSQL is required (TALLY_REQUIRE_POSTGRES=1): " \
               << tally_pg_installed_.message();                        \
      }                                                                 \
      GTEST_SKIP() << tally_pg_installed_.message();                    \
    }                                                                   \
  } while (false)

#endif  // TALLY_SUPPORT_PG_TEST_MACROS_H_
