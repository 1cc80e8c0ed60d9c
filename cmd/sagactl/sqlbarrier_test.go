package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// sql-barrier print writes the DDL; apply creates the table on the real
// PostgreSQL, then finds nothing to do; a password on the command line is
// refused.
func TestSQLBarrierSchema(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sql-barrier", "print", "--table", "pay_barrier"}, &out, &errb); code != exitOK ||
		!strings.Contains(out.String(), "CREATE TABLE IF NOT EXISTS pay_barrier") {
		t.Fatalf("print: %d %q %q", code, out.String(), errb.String())
	}
	if code := run(context.Background(), []string{"sql-barrier", "apply", "--dsn", "postgres://u:secret@127.0.0.1:1/x"}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "refused") {
		t.Fatalf("--dsn with a password: %d %q", code, errb.String())
	}

	dsn, schema := testenv.PostgresSchema(t)
	t.Setenv(envSQLBarrierDSN, "")
	file := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(file, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"version 0 -> 1", "at version 1, nothing to do"} {
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), []string{"sql-barrier", "apply", "--dsn-file", file, "--table", schema + ".pay_barrier"}, &out, &errb); code != exitOK ||
			!strings.Contains(out.String(), want) {
			t.Fatalf("apply %d: %d %q %q; want %q", i+1, code, out.String(), errb.String(), want)
		}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pay_barrier`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the table: %d, %v", n, err)
	}
}
