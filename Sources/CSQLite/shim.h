// The system's SQLite: libsqlite3-dev on Debian and Ubuntu, the SDK's on Apple platforms.
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro that casts -1 to a function pointer, which Swift cannot import.
static inline sqlite3_destructor_type csqlite_transient(void) { return SQLITE_TRANSIENT; }

// Empties a database in place, even a corrupt one, so that every connection to the file (in
// this process and others) goes on with the same, now empty, file. sqlite3_db_config is
// variadic, which Swift cannot call. Returns an SQLite result code.
static inline int csqlite_reset_database(sqlite3 *db) {
  int rc = sqlite3_db_config(db, SQLITE_DBCONFIG_RESET_DATABASE, 1, 0);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_exec(db, "VACUUM", 0, 0, 0);
  int off = sqlite3_db_config(db, SQLITE_DBCONFIG_RESET_DATABASE, 0, 0);
  return rc != SQLITE_OK ? rc : off;
}
