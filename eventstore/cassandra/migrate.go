package cassandra

// Schema upgrades. Every table is created with CREATE TABLE IF NOT EXISTS,
// which leaves a table created by an older release as it is; releases since
// the first one added columns (es_transaction and es_frozen_transaction:
// lifetime_start, pause_event, trace_id, trace_parent, definition_version),
// and an insert that names a column the table lacks fails with "Undefined
// column name". So after its CREATE statements ApplySchema compares each
// table with its CREATE TABLE statement (the one source of truth: the
// expected columns and types are parsed from it) and adds the columns it
// lacks, additively: nothing is ever dropped or altered.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// ErrSchemaMismatch is wrapped by the errors of a schema upgrade that
// adding columns cannot do: a column of the schema that exists with another
// type (a *ColumnTypeError), or a table whose primary key differs from the
// schema's. Such a table has to be changed by hand.
var ErrSchemaMismatch = errors.New("cassandra: a table differs from the schema in a way that adding columns cannot fix")

// ColumnTypeError reports an existing column whose type is not the one the
// schema declares. It wraps ErrSchemaMismatch.
type ColumnTypeError struct {
	Keyspace, Table, Column string
	// Found is the column's type in the keyspace (system_schema.columns),
	// Want the type of the schema's CREATE TABLE statement.
	Found, Want string
}

func (e *ColumnTypeError) Error() string {
	return fmt.Sprintf("cassandra: table %s.%s: column %s has type %s, want %s (schema upgrades only add columns; change or drop this column by hand)",
		e.Keyspace, e.Table, e.Column, e.Found, e.Want)
}

func (e *ColumnTypeError) Unwrap() error { return ErrSchemaMismatch }

// Migrate adds to the event store's tables in keyspace every column of the
// current schema (schema.cql) that they lack, with ALTER TABLE … ADD, and
// waits for schema agreement after each. ApplySchema (so New with
// CreateSchema, and `sagactl schema apply`) calls it after its CREATE
// statements. It returns the ALTER statements that were needed (empty when
// the tables were up to date); tables that do not exist are left to the
// CREATE statements.
//
// It never drops or changes a column: a column that exists with another
// type fails with a *ColumnTypeError, a table lacking a primary-key column
// with an error wrapping ErrSchemaMismatch, before anything is altered.
// Several instances may run it at once: a column another one has just
// added counts as added, and the columns are read again at the end.
func Migrate(ctx context.Context, session *gocql.Session, keyspace string) ([]string, error) {
	defs, err := schemaTables(keyspace)
	if err != nil {
		return nil, err
	}
	return addMissingColumns(ctx, session, defs)
}

// MigrationCQL returns the statements ApplySchema would run that change
// keyspace as it is now, in schema order: every statement of the schema
// when the keyspace does not exist (with replication r), else the CREATE
// TABLE of each missing table and the ALTER TABLE … ADD of each missing
// column. Empty means up to date. It changes nothing; it fails like
// Migrate on a column of another type.
func MigrationCQL(ctx context.Context, session *gocql.Session, keyspace string, r Replication) ([]string, error) {
	stmts, err := SchemaStatements(keyspace, r)
	if err != nil {
		return nil, err
	}
	var n int
	err = session.Query(`SELECT count(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, keyspace).
		Consistency(gocql.LocalOne).Idempotent(true).ScanContext(ctx, &n)
	if err != nil {
		return nil, fmt.Errorf("cassandra: read keyspace %s: %w", keyspace, err)
	}
	if n == 0 {
		return stmts, nil
	}
	live, err := readColumns(ctx, session, keyspace)
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	for _, stmt := range stmts {
		if !isCreateTable(stmt) {
			continue
		}
		def, err := parseCreateTable(stmt)
		if err != nil {
			return nil, err
		}
		if _, ok := live[def.name]; !ok {
			out = append(out, stmt)
			continue
		}
		alters, err := planColumns(def, live)
		out = append(out, alters...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// MigrationCQLWithConfig connects with cfg (without selecting its
// keyspace), returns MigrationCQL for cfg.Keyspace and cfg.Replication,
// and disconnects: what `sagactl schema diff` prints.
func MigrationCQLWithConfig(ctx context.Context, cfg Config) ([]string, error) {
	cl, err := cfg.ClusterConfig()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cl.Keyspace = ""
	session, err := Connect(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("cassandra: connect to %v: %w", cfg.ContactPoints, err)
	}
	defer session.Close()
	return MigrationCQL(ctx, session, cfg.Keyspace, cfg.Replication)
}

// AddMissingColumns is Migrate for other tables: creates are CREATE TABLE
// statements naming their keyspace (keyspace.table), the source of truth
// of the columns and types each existing table must have. Packages that
// keep tables of their own (tracewindow/cassandraindex) call it after
// creating them.
func AddMissingColumns(ctx context.Context, session *gocql.Session, creates []string) ([]string, error) {
	defs, err := parseCreates(creates)
	if err != nil {
		return nil, err
	}
	return addMissingColumns(ctx, session, defs)
}

// MissingColumnsCQL returns the ALTER TABLE statements AddMissingColumns
// would run now, without running them.
func MissingColumnsCQL(ctx context.Context, session *gocql.Session, creates []string) ([]string, error) {
	defs, err := parseCreates(creates)
	if err != nil {
		return nil, err
	}
	return planAll(ctx, session, defs)
}

// --- CREATE TABLE statements ------------------------------------------------

// tableDef is a table as its CREATE TABLE statement declares it.
type tableDef struct {
	keyspace, name string
	columns        []columnDef
}

// columnDef is one column: its name, its type as written, and whether it is
// part of the primary key.
type columnDef struct {
	name, typ  string
	primaryKey bool
}

var (
	createTableHead = regexp.MustCompile(`(?is)^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:(\w+)\.)?(\w+)\s*\(`)
	columnName      = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	inlineKey       = regexp.MustCompile(`(?i)\s+PRIMARY\s+KEY$`)
	primaryKeyDecl  = regexp.MustCompile(`(?is)^PRIMARY\s+KEY\s*\((.*)\)$`)
	varcharType     = regexp.MustCompile(`\bvarchar\b`)
)

func isCreateTable(stmt string) bool { return createTableHead.MatchString(stmt) }

// schemaTables parses the CREATE TABLE statements of schema.cql for
// keyspace.
func schemaTables(keyspace string) ([]tableDef, error) {
	// The replication only shapes CREATE KEYSPACE, which is skipped.
	stmts, err := SchemaStatements(keyspace, SimpleReplication(1))
	if err != nil {
		return nil, err
	}
	var creates []string
	for _, stmt := range stmts {
		if isCreateTable(stmt) {
			creates = append(creates, stmt)
		}
	}
	return parseCreates(creates)
}

func parseCreates(creates []string) ([]tableDef, error) {
	defs := make([]tableDef, 0, len(creates))
	for _, stmt := range creates {
		def, err := parseCreateTable(stmt)
		if err != nil {
			return nil, err
		}
		if def.keyspace == "" {
			return nil, fmt.Errorf("cassandra: CREATE TABLE %s: the table must be named keyspace.table", def.name)
		}
		defs = append(defs, def)
	}
	return defs, nil
}

// parseCreateTable reads the columns of a CREATE TABLE statement: the
// definitions between its outer parentheses, split at the commas outside
// parentheses and angle brackets; a PRIMARY KEY clause (or a column's
// inline PRIMARY KEY) marks the key columns. Table options are ignored.
func parseCreateTable(stmt string) (tableDef, error) {
	m := createTableHead.FindStringSubmatchIndex(stmt)
	if m == nil {
		return tableDef{}, fmt.Errorf("cassandra: not a CREATE TABLE statement: %s", firstLine(stmt))
	}
	def := tableDef{name: strings.ToLower(stmt[m[4]:m[5]])}
	if m[2] >= 0 {
		def.keyspace = strings.ToLower(stmt[m[2]:m[3]])
	}
	bad := func(format string, args ...any) (tableDef, error) {
		return tableDef{}, fmt.Errorf("cassandra: CREATE TABLE %s: "+format, append([]any{def.name}, args...)...)
	}
	body, ok := untilClose(stmt[m[1]:])
	if !ok {
		return bad("unbalanced parentheses")
	}
	var keys []string
	for _, part := range splitTop(body) {
		part = strings.Join(strings.Fields(part), " ")
		if km := primaryKeyDecl.FindStringSubmatch(part); km != nil {
			for _, k := range strings.FieldsFunc(km[1], func(r rune) bool { return r == '(' || r == ')' || r == ',' || r == ' ' }) {
				keys = append(keys, strings.ToLower(k))
			}
			continue
		}
		name, typ, _ := strings.Cut(part, " ")
		name = strings.ToLower(name)
		col := columnDef{name: name, typ: strings.TrimSpace(typ)}
		if loc := inlineKey.FindStringIndex(col.typ); loc != nil {
			col.typ, col.primaryKey = col.typ[:loc[0]], true
		}
		if !columnName.MatchString(name) || col.typ == "" {
			return bad("cannot read the column definition %q", part)
		}
		def.columns = append(def.columns, col)
	}
	for _, k := range keys {
		i := slices.IndexFunc(def.columns, func(c columnDef) bool { return c.name == k })
		if i < 0 {
			return bad("primary-key column %s is not declared", k)
		}
		def.columns[i].primaryKey = true
	}
	if !slices.ContainsFunc(def.columns, func(c columnDef) bool { return c.primaryKey }) {
		return bad("no primary key")
	}
	return def, nil
}

// untilClose returns s up to the ')' that closes a '(' opened just before
// s.
func untilClose(s string) (string, bool) {
	depth := 1
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[:i], true
			}
		}
	}
	return "", false
}

// splitTop splits s at the commas outside parentheses and angle brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(', '<':
			depth++
		case ')', '>':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		parts = append(parts, last)
	}
	return slices.DeleteFunc(parts, func(p string) bool { return strings.TrimSpace(p) == "" })
}

// normType is a type as Cassandra renders it in system_schema.columns:
// lower case, without blanks, varchar as text.
func normType(t string) string {
	t = strings.ToLower(strings.Join(strings.Fields(t), ""))
	return varcharType.ReplaceAllString(t, "text")
}

// --- the keyspace as it is ----------------------------------------------------

// liveColumn is a column as system_schema.columns describes it.
type liveColumn struct {
	typ, kind string // kind: partition_key, clustering, regular, static
}

// readColumns reads the columns of every table of keyspace (one partition
// of system_schema.columns): table -> column -> type and kind.
func readColumns(ctx context.Context, session *gocql.Session, keyspace string) (map[string]map[string]liveColumn, error) {
	iter := session.Query(`SELECT table_name, column_name, type, kind FROM system_schema.columns WHERE keyspace_name = ?`, keyspace).
		Consistency(gocql.LocalOne).Idempotent(true).IterContext(ctx)
	out := map[string]map[string]liveColumn{}
	var table, column string
	var c liveColumn
	for iter.Scan(&table, &column, &c.typ, &c.kind) {
		if out[table] == nil {
			out[table] = map[string]liveColumn{}
		}
		out[table][column] = c
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("cassandra: read the columns of keyspace %s: %w", keyspace, err)
	}
	return out, nil
}

// planColumns compares def with its table in live (which must exist): the
// ALTER TABLE … ADD of each missing column, and the mismatches that adding
// columns cannot fix.
func planColumns(def tableDef, live map[string]map[string]liveColumn) ([]string, error) {
	have := live[def.name]
	var alters []string
	var errs []error
	for _, col := range def.columns {
		got, ok := have[col.name]
		isKey := got.kind == "partition_key" || got.kind == "clustering"
		switch {
		case !ok && col.primaryKey:
			errs = append(errs, fmt.Errorf("%w: table %s.%s has no column %s, part of the schema's primary key (a table created by something else? it cannot be upgraded by adding columns)",
				ErrSchemaMismatch, def.keyspace, def.name, col.name))
		case !ok:
			alters = append(alters, fmt.Sprintf("ALTER TABLE %s.%s ADD %s %s", def.keyspace, def.name, col.name, col.typ))
		case normType(got.typ) != normType(col.typ):
			errs = append(errs, &ColumnTypeError{Keyspace: def.keyspace, Table: def.name, Column: col.name, Found: got.typ, Want: col.typ})
		case isKey != col.primaryKey:
			want := "a regular column"
			if col.primaryKey {
				want = "part of the primary key"
			}
			errs = append(errs, fmt.Errorf("%w: table %s.%s: column %s is %s, want %s", ErrSchemaMismatch, def.keyspace, def.name, col.name, got.kind, want))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return alters, nil
}

// planAll reads the keyspaces of defs and plans every existing table.
func planAll(ctx context.Context, session *gocql.Session, defs []tableDef) ([]string, error) {
	lives := map[string]map[string]map[string]liveColumn{}
	var alters []string
	var errs []error
	for _, def := range defs {
		live, ok := lives[def.keyspace]
		if !ok {
			var err error
			if live, err = readColumns(ctx, session, def.keyspace); err != nil {
				return nil, err
			}
			lives[def.keyspace] = live
		}
		if _, ok := live[def.name]; !ok {
			continue // CREATE TABLE makes it whole
		}
		a, err := planColumns(def, live)
		alters = append(alters, a...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return alters, nil
}

// addMissingColumns plans, runs the ALTER statements (a column that another
// instance added meanwhile counts as added), waits for schema agreement
// after each, and reads the columns again to check.
func addMissingColumns(ctx context.Context, session *gocql.Session, defs []tableDef) ([]string, error) {
	alters, err := planAll(ctx, session, defs)
	if err != nil || len(alters) == 0 {
		return nil, err
	}
	for _, stmt := range alters {
		if err := session.Query(stmt).ExecContext(ctx); err != nil && !columnExists(err) {
			return nil, fmt.Errorf("cassandra: upgrade schema: %s: %w", stmt, err)
		}
		if err := session.AwaitSchemaAgreement(ctx); err != nil {
			return nil, fmt.Errorf("cassandra: upgrade schema: await agreement after %s: %w", stmt, err)
		}
	}
	left, err := planAll(ctx, session, defs)
	if err != nil {
		return nil, err
	}
	if len(left) > 0 {
		return nil, fmt.Errorf("cassandra: upgrade schema: columns still missing after ALTER TABLE: %s", strings.Join(left, "; "))
	}
	return alters, nil
}

// columnExists recognises the refusal of ALTER TABLE … ADD of a column that
// exists: "Column with name 'x' already exists" (Cassandra 4 and 5),
// "Invalid column name x because it conflicts with an existing column"
// (Cassandra 3). Its type is checked when the columns are read again.
func columnExists(err error) bool {
	var invalid *gocql.RequestErrInvalid
	if !errors.As(err, &invalid) {
		return false
	}
	msg := strings.ToLower(invalid.Message())
	return strings.Contains(msg, "already exists") || strings.Contains(msg, "conflicts with an existing column")
}
