#include "mariadb/sidecar/statement_tables.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::ElementsAre;
using ::testing::IsSupersetOf;

TEST(TablesAStatementMayChange, TheTargetOfAnInsertOrReplaceAlone) {
  // pt-table-checksum's chunk statement reads the kept table only.
  EXPECT_THAT(
      TablesAStatementMayChange(
          "REPLACE INTO `percona`.`checksums` (db, tbl, chunk, this_cnt, "
          "this_crc) SELECT 'db1', 't', '1', COUNT(*) AS cnt, "
          "COALESCE(LOWER(CONV(BIT_XOR(CAST(CRC32(CONCAT_WS('#', `id`, `a`)) "
          "AS UNSIGNED)), 10, 16)), 0) AS crc FROM `db1`.`t` FORCE "
          "INDEX(`PRIMARY`) WHERE ((`id` >= '1')) /*checksum chunk*/"),
      ElementsAre("percona.checksums"));
  EXPECT_THAT(TablesAStatementMayChange(
                  "INSERT LOW_PRIORITY IGNORE INTO t (a) SELECT a FROM u"),
              ElementsAre("t"));
  EXPECT_THAT(TablesAStatementMayChange("insert `db1`.`t` values (1)"),
              ElementsAre("db1.t"));
  EXPECT_THAT(TablesAStatementMayChange(
                  "/* app */ INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE "
                  "a = (SELECT max(a) FROM u)"),
              ElementsAre("t"));
}

TEST(TablesAStatementMayChange, LiteralsAndCommentsAreNoNames) {
  // pt-table-checksum's bookkeeping names the table only in literals.
  EXPECT_THAT(TablesAStatementMayChange(
                  "UPDATE `percona`.`checksums` SET chunk_time = '0.01', "
                  "master_crc = 'abc', master_cnt = '20000' WHERE db = 'db1' "
                  "AND tbl = 't' AND chunk = '1'"),
              ElementsAre("percona.checksums"));
  EXPECT_THAT(TablesAStatementMayChange(
                  "DELETE FROM `percona`.`checksums` WHERE db = 'db1' AND tbl "
                  "= 't'"),
              ElementsAre("percona.checksums"));
  EXPECT_THAT(TablesAStatementMayChange(
                  "CREATE TABLE x (a text DEFAULT 'it''s t', b text DEFAULT "
                  "\"db1.t\") -- db1.t\n# t\n/* t */"),
              ElementsAre("CREATE", "TABLE", "x", "a", "text", "DEFAULT", "b",
                          "text", "DEFAULT"));
}

TEST(TablesAStatementMayChange, EveryTableAnUpdateJoins) {
  EXPECT_THAT(TablesAStatementMayChange(
                  "UPDATE IGNORE a JOIN db1.t ON a.id = t.id SET t.x = 1"),
              IsSupersetOf({"a", "db1.t"}));
  EXPECT_THAT(TablesAStatementMayChange("UPDATE t SET a = 'u'"),
              ElementsAre("t"));
}

TEST(TablesAStatementMayChange, AnythingElseNamesEveryWord) {
  // A multi-table DELETE, DDL, an executable comment's code.
  EXPECT_THAT(TablesAStatementMayChange("DELETE t1, t2 FROM t1 JOIN t2"),
              IsSupersetOf({"t1", "t2"}));
  EXPECT_THAT(TablesAStatementMayChange("DELETE FROM t1 USING t1 JOIN t2"),
              IsSupersetOf({"t1", "t2"}));
  EXPECT_THAT(TablesAStatementMayChange("ALTER TABLE `db1`.`t` ADD c int"),
              IsSupersetOf({"db1.t"}));
  EXPECT_THAT(TablesAStatementMayChange("TRUNCATE /*!40000 TABLE t */"),
              IsSupersetOf({"t"}));
  EXPECT_THAT(TablesAStatementMayChange("RENAME TABLE t TO `t old`"),
              IsSupersetOf({"t", "t old"}));
  EXPECT_THAT(TablesAStatementMayChange(
                  "SET STATEMENT max_statement_time=1 FOR UPDATE t SET a = 1"),
              IsSupersetOf({"t"}));
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
