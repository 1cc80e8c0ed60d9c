package cassandra

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// v1Tables parses testdata/schema_v1.cql, the schema as first released.
func v1Tables(t *testing.T, keyspace string) []tableDef {
	t.Helper()
	data, err := os.ReadFile("testdata/schema_v1.cql")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.NewReplacer("${keyspace}", keyspace, "${replication}", SimpleReplication(1).CQL()).Replace(string(data))
	var defs []tableDef
	for _, stmt := range splitStatements(script) {
		if isCreateTable(stmt) {
			def, err := parseCreateTable(stmt)
			if err != nil {
				t.Fatal(err)
			}
			defs = append(defs, def)
		}
	}
	return defs
}

// liveOf is what system_schema.columns would say about tables created by
// defs.
func liveOf(defs []tableDef) map[string]map[string]liveColumn {
	live := map[string]map[string]liveColumn{}
	for _, d := range defs {
		live[d.name] = map[string]liveColumn{}
		for _, c := range d.columns {
			kind := "regular"
			if c.primaryKey {
				kind = "partition_key"
			}
			live[d.name][c.name] = liveColumn{typ: normType(c.typ), kind: kind}
		}
	}
	return live
}

func TestSchemaTablesParse(t *testing.T) {
	defs, err := schemaTables("ks")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.name)
		if d.keyspace != "ks" {
			t.Errorf("%s: keyspace %q", d.name, d.keyspace)
		}
	}
	if !slices.Equal(names, tableNames) {
		t.Fatalf("tables %v, want %v", names, tableNames)
	}
	tx := defs[0]
	want := map[string]string{
		"region": "text", "completed": "frozen<list<frozen<tuple<int, text, boolean>>>>", "hints": "frozen<map<text, text>>",
		"lifetime_start": "timestamp", "pause_event": "text", "trace_id": "text", "trace_parent": "text", "version": "bigint", "definition_version": "int",
	}
	var keys []string
	for _, c := range tx.columns {
		if w, ok := want[c.name]; ok && c.typ != w {
			t.Errorf("es_transaction.%s: type %q, want %q", c.name, c.typ, w)
		}
		if c.primaryKey {
			keys = append(keys, c.name)
		}
	}
	if len(tx.columns) != 27 || !slices.Equal(keys, []string{"region", "cluster", "service_name", "transaction_id"}) {
		t.Errorf("es_transaction: %d columns, keys %v", len(tx.columns), keys)
	}
	// Every column an INSERT of the store names is declared.
	for _, stmt := range []string{cqlUpsertTx, cqlInsertFrozen, cqlInsertTryout, cqlPutMarker} {
		table := dmlTable.FindStringSubmatch(stmt)[1]
		i := slices.IndexFunc(defs, func(d tableDef) bool { return d.name == table })
		for _, col := range strings.Split(insertCols.FindStringSubmatch(stmt)[1], ",") {
			col = strings.TrimSpace(col)
			if !slices.ContainsFunc(defs[i].columns, func(c columnDef) bool { return c.name == col }) {
				t.Errorf("%s: column %s not parsed from schema.cql", table, col)
			}
		}
	}
}

func TestParseCreateTableForms(t *testing.T) {
	def, err := parseCreateTable("create table if not exists KS.T (Id uuid PRIMARY KEY, m map<text, frozen<list<int>>>, v VARCHAR) with comment = 'x (y)'")
	if err != nil {
		t.Fatal(err)
	}
	if def.keyspace != "ks" || def.name != "t" || len(def.columns) != 3 || !def.columns[0].primaryKey ||
		def.columns[0].typ != "uuid" || def.columns[1].typ != "map<text, frozen<list<int>>>" || def.columns[1].primaryKey {
		t.Fatalf("parsed %+v", def)
	}
	if normType(def.columns[2].typ) != "text" || normType("frozen<map<varchar, text>>") != "frozen<map<text,text>>" {
		t.Fatal("varchar is not text")
	}
	for _, bad := range []string{
		"CREATE TABLE ks.t (a text, b int",              // unbalanced
		"CREATE TABLE ks.t (a text, PRIMARY KEY ((x)))", // undeclared key
		"CREATE TABLE ks.t (a text, b int)",             // no key
		`CREATE TABLE ks.t ("A" text, PRIMARY KEY (a))`, // quoted name
		"CREATE TABLE ks.t (a, PRIMARY KEY (a))",        // no type
		"CREATE INDEX i ON ks.t (a)",                    // not a table
		"SELECT * FROM ks.t WHERE a = ? AND (b) = (?)",  // not a table
	} {
		if _, err := parseCreateTable(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := parseCreates([]string{"CREATE TABLE t (a text PRIMARY KEY)"}); err == nil {
		t.Error("a table without keyspace was accepted")
	}
}

// TestPlanFromFirstRelease: on tables created by the first release, the
// plan is the 4 columns added since, on both saga tables, in schema order
// (the tables added since, es_admin_audit and es_business_key, are left to
// their CREATE statements).
func TestPlanFromFirstRelease(t *testing.T) {
	defs, err := schemaTables("ks")
	if err != nil {
		t.Fatal(err)
	}
	old := v1Tables(t, "ks")
	live := liveOf(old)
	// The first release had every table but those added since.
	var added []string
	for _, d := range defs {
		if _, ok := live[d.name]; !ok {
			added = append(added, d.name)
		}
	}
	if since := []string{TableAdminAudit, TableBusinessKey}; len(old) != len(defs)-len(since) || !slices.Equal(added, since) {
		t.Fatalf("v1 fixture has %d tables, lacks %v; want all but %v", len(old), added, since)
	}
	var got []string
	for _, d := range defs {
		if _, ok := live[d.name]; !ok {
			continue
		}
		alters, err := planColumns(d, live)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, alters...)
	}
	var want []string
	for _, table := range []string{TableTransaction, TableFrozenTransaction} {
		want = append(want,
			"ALTER TABLE ks."+table+" ADD lifetime_start timestamp",
			"ALTER TABLE ks."+table+" ADD pause_event text",
			"ALTER TABLE ks."+table+" ADD trace_id text",
			"ALTER TABLE ks."+table+" ADD trace_parent text",
			"ALTER TABLE ks."+table+" ADD definition_version int")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plan\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Up to date: nothing.
	for _, d := range defs {
		if alters, err := planColumns(d, liveOf(defs)); err != nil || len(alters) > 0 {
			t.Fatalf("%s up to date: %v %v", d.name, alters, err)
		}
	}
}

func TestPlanMismatches(t *testing.T) {
	defs, err := schemaTables("ks")
	if err != nil {
		t.Fatal(err)
	}
	tx := defs[0]
	live := liveOf(v1Tables(t, "ks"))
	live[TableTransaction]["trace_id"] = liveColumn{typ: "int", kind: "regular"}
	live[TableTransaction]["error"] = liveColumn{typ: "blob", kind: "regular"}
	_, err = planColumns(tx, live)
	var cte *ColumnTypeError
	if !errors.As(err, &cte) || !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("err %v", err)
	}
	for _, s := range []string{"table ks.es_transaction: column error has type blob, want text", "column trace_id has type int, want text"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}

	live = liveOf(defs)
	delete(live[TableTransaction], "transaction_id")
	if _, err := planColumns(tx, live); !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), "no column transaction_id") {
		t.Fatalf("missing key column: %v", err)
	}
	live = liveOf(defs)
	live[TableTransaction]["domain"] = liveColumn{typ: "text", kind: "clustering"}
	if _, err := planColumns(tx, live); !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), "column domain is clustering, want a regular column") {
		t.Fatalf("key column: %v", err)
	}
}
