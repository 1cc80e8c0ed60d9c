package sqlbarrier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
)

// DefaultTable is the barrier table's name unless WithTable says otherwise.
const DefaultTable = "stacksaga_barrier"

// SchemaVersion is the version of the barrier table CreateSchema creates.
const SchemaVersion = 1

// ErrInvalidTable is returned for a table name that is not a plain
// PostgreSQL identifier ([a-z_][a-z0-9_]*, at most 50 bytes), optionally
// qualified by a schema of the same form.
var ErrInvalidTable = errors.New("sqlbarrier: invalid table name")

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// ValidTable checks a table name for WithTable and CreateSchema.
func ValidTable(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w: %q", ErrInvalidTable, name)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return fmt.Errorf("%w: %q (want [a-z_][a-z0-9_]* of at most 50 bytes, optionally schema.table)", ErrInvalidTable, name)
		}
	}
	return nil
}

// migrations[i] takes the schema from version i to i+1; %[1]s is the table,
// %[2]s its bare name (for index names).
var migrations = []string{
	`CREATE TABLE IF NOT EXISTS %[1]s (
	tx_id       text        NOT NULL,
	span        integer     NOT NULL,
	kind        text        NOT NULL CHECK (kind IN ('process', 'revert')),
	attempt     integer     NOT NULL,
	state       text        NOT NULL CHECK (state IN ('running', 'done', 'voided')),
	paused      boolean     NOT NULL DEFAULT false,
	reply       bytea,
	recorded_at timestamptz NOT NULL,
	PRIMARY KEY (tx_id, span, kind)
);
CREATE INDEX IF NOT EXISTS %[2]s_recorded_at ON %[1]s (recorded_at)`,
}

// SchemaSQL returns the statements that create the barrier table named
// table at SchemaVersion (for review; CreateSchema runs them with the
// version bookkeeping).
func SchemaSQL(table string) (string, error) {
	if err := ValidTable(table); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range migrations {
		b.WriteString(fmt.Sprintf(m, table, bare(table)))
		b.WriteString(";\n")
	}
	return b.String(), nil
}

// CreateSchema creates the barrier table named table (DefaultTable when
// empty) and its version table (<table>_schema), or migrates them to
// SchemaVersion. It runs in one transaction under an advisory lock, so
// concurrent calls (several instances starting at once) are safe, and a
// second call changes nothing. It returns the version found before (0: none)
// and fails on a table of a newer version than this build knows.
func CreateSchema(ctx context.Context, db *sql.DB, table string) (before int, err error) {
	if table == "" {
		table = DefaultTable
	}
	if err := ValidTable(table); err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlbarrier: create schema: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	h := fnv.New64a()
	h.Write([]byte("stacksaga-barrier:" + table))
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
		return 0, fmt.Errorf("sqlbarrier: create schema: lock: %w", err)
	}
	vt := table + "_schema"
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (version integer NOT NULL)`, vt)); err != nil {
		return 0, fmt.Errorf("sqlbarrier: create schema: %s: %w", vt, err)
	}
	switch err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT version FROM %s`, vt)).Scan(&before); {
	case errors.Is(err, sql.ErrNoRows):
		before = 0
	case err != nil:
		return 0, fmt.Errorf("sqlbarrier: create schema: read version: %w", err)
	}
	if before > len(migrations) {
		return before, fmt.Errorf("sqlbarrier: %s is at schema version %d, newer than this build's %d", table, before, SchemaVersion)
	}
	for v := before; v < len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(migrations[v], table, bare(table))); err != nil {
			return before, fmt.Errorf("sqlbarrier: create schema: migration to version %d: %w", v+1, err)
		}
	}
	if before == 0 {
		_, err = tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (version) VALUES ($1)`, vt), SchemaVersion)
	} else {
		_, err = tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET version = $1`, vt), SchemaVersion)
	}
	if err != nil {
		return before, fmt.Errorf("sqlbarrier: create schema: record version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return before, fmt.Errorf("sqlbarrier: create schema: commit: %w", err)
	}
	return before, nil
}

func bare(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}
