package cassandra

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The conventions of seed 000: no query uses ALLOW FILTERING, and every
// query names a full partition key. This test finds every CQL string
// literal in the package's non-test Go files and checks it against the
// partition keys declared in schema.cql.

var (
	createTable  = regexp.MustCompile(`(?is)CREATE TABLE IF NOT EXISTS \$\{keyspace\}\.(\w+)\s*\((.*?)\)\s*(?:WITH[^;]*)?;`)
	partitionKey = regexp.MustCompile(`(?is)PRIMARY KEY\s*\(\s*\(([^)]*)\)`)
	dmlStart     = regexp.MustCompile(`(?s)^\s*(SELECT\s.*\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\S+\s+(?:USING\s.*?\s)?SET\s|DELETE\s(.*\s)?FROM\s)`)
	dmlTable     = regexp.MustCompile(`(?is)^\s*(?:SELECT\b.*?\bFROM|INSERT\s+INTO|UPDATE|DELETE\b.*?\bFROM)\s+(?:\{ks\}\.|\w+\.)?(\w+)`)
	insertCols   = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+\S+\s*\(([^)]*)\)`)
	whereClause  = regexp.MustCompile(`(?is)\bWHERE\b(.*?)(?:\bLIMIT\b|\bIF\b|\bALLOW\b|$)`)
	allowFilter  = regexp.MustCompile(`(?i)\bALLOW\s+FILTERING\b`)
)

// partitionKeys parses schema.cql: table -> partition key columns.
func partitionKeys(t *testing.T) map[string][]string {
	t.Helper()
	keys := make(map[string][]string)
	for _, m := range createTable.FindAllStringSubmatch(schemaTemplate, -1) {
		pk := partitionKey.FindStringSubmatch(m[2])
		if pk == nil {
			t.Fatalf("schema.cql: table %s has no composite partition key", m[1])
		}
		for _, col := range strings.Split(pk[1], ",") {
			keys[m[1]] = append(keys[m[1]], strings.TrimSpace(col))
		}
	}
	if len(keys) != len(tableNames) {
		t.Fatalf("schema.cql declares %d tables, want %d", len(keys), len(tableNames))
	}
	return keys
}

// checkCQL returns what is wrong with one statement.
func checkCQL(stmt string, keys map[string][]string) []string {
	var problems []string
	if allowFilter.MatchString(stmt) {
		problems = append(problems, "uses ALLOW FILTERING")
	}
	m := dmlTable.FindStringSubmatch(stmt)
	if m == nil {
		return append(problems, "names no table")
	}
	pk, ok := keys[m[1]]
	if !ok {
		return append(problems, "names table "+m[1]+", which schema.cql does not declare")
	}
	if cols := insertCols.FindStringSubmatch(stmt); cols != nil {
		have := map[string]bool{}
		for _, c := range strings.Split(cols[1], ",") {
			have[strings.TrimSpace(c)] = true
		}
		for _, c := range pk {
			if !have[c] {
				problems = append(problems, "inserts without partition-key column "+c)
			}
		}
		return problems
	}
	w := whereClause.FindStringSubmatch(stmt)
	if w == nil {
		return append(problems, "has no WHERE clause (a full scan)")
	}
	for _, c := range pk {
		if !regexp.MustCompile(`(?i)\b` + c + `\s*=\s*\?`).MatchString(w[1]) {
			problems = append(problems, "does not restrict partition-key column "+c+" with =")
		}
	}
	return problems
}

// packageCQL returns every CQL string literal of the package's non-test
// files, with where it is.
func packageCQL(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			// The schema upgrade's reads of system_schema (each of one
			// keyspace_name partition) are not statements on the store's
			// tables.
			if err == nil && dmlStart.MatchString(s) && !strings.Contains(s, " system_schema.") {
				out[s] = fset.Position(lit.Pos()).String()
			}
			return true
		})
	}
	return out
}

func TestCQLNamesFullPartitionKeys(t *testing.T) {
	keys := partitionKeys(t)
	stmts := packageCQL(t)
	if len(stmts) < 30 {
		t.Fatalf("found %d CQL statements in the package, expected the store's ~35", len(stmts))
	}
	for stmt, pos := range stmts {
		for _, p := range checkCQL(stmt, keys) {
			t.Errorf("%s: statement %s:\n\t%s", pos, p, stmt)
		}
	}
}

// The checker itself must catch the patterns it bans.
func TestCQLCheckerCatchesViolations(t *testing.T) {
	keys := partitionKeys(t)
	bad := map[string]string{
		`SELECT * FROM {ks}.es_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? ALLOW FILTERING`: "ALLOW FILTERING",
		`SELECT * FROM {ks}.es_transaction WHERE region = ? AND cluster = ? AND service_name = ?`:                                        "transaction_id",
		`SELECT * FROM {ks}.es_recovery_windows_by_day`:                                                                                  "no WHERE",
		`DELETE FROM {ks}.es_execution_markers WHERE region = ? AND cluster = ? AND transaction_id = ?`:                                  "service_name",
		`INSERT INTO {ks}.es_days_by_year (region, cluster, service_name, date_of_year) VALUES (?, ?, ?, ?)`:                             "year",
		`SELECT * FROM {ks}.es_instances_by_recovery_window WHERE region = ? AND cluster = ? AND service_name = ? AND minute_of_day = ?`: "date_of_year",
		`SELECT * FROM {ks}.nope WHERE a = ?`: "does not declare",
		`UPDATE {ks}.es_execution_markers USING TTL ? SET state = ? WHERE region = ? AND cluster = ? AND transaction_id = ? AND span = ? IF owner = ?`: "service_name",
	}
	for stmt, want := range bad {
		problems := strings.Join(checkCQL(stmt, keys), "; ")
		if !strings.Contains(problems, want) {
			t.Errorf("checker on %q reported %q, want a problem mentioning %q", stmt, problems, want)
		}
	}
	for _, good := range []string{cqlSelectTx, cqlDropBucket, cqlUpsertEntry, cqlSelectInstance, cqlCommitMarker, cqlDeleteMarkerIf} {
		if p := checkCQL(good, keys); len(p) > 0 {
			t.Errorf("checker rejects %q: %v", good, p)
		}
		if !dmlStart.MatchString(good) {
			t.Errorf("the finder does not take %q for a statement", good)
		}
	}
}
