// TableRows (node/sidecar/table_rows.h) of a sidecar to PostgreSQL.
//
// A put is `INSERT ... ON CONFLICT (key) DO UPDATE` of the columns the JSON
// names, json_populate_record converting each value from its text; a get
// prints every value as PostgreSQL prints it, but arrays, composites and
// JSON as JSON, so that what get prints put takes back.
#ifndef TALLY_NODE_SIDECAR_POSTGRES_TABLE_ROWS_H_
#define TALLY_NODE_SIDECAR_POSTGRES_TABLE_ROWS_H_

#include <memory>
#include <string>
#include <vector>

#include "node/sidecar/table_rows.h"

namespace tally {
namespace node {

// `conninfo`: the node's database (libpq string or URL); `tables`:
// "schema.table" names.
std::unique_ptr<TableRows> NewPostgresTableRows(
    std::string conninfo, std::vector<std::string> tables);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_POSTGRES_TABLE_ROWS_H_
