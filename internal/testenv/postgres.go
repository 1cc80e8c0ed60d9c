package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// EnvPostgresDSN is the URL of a real PostgreSQL server, e.g.
// "postgres://stacksaga:stacksaga-local@127.0.0.1:55432/stacksaga?sslmode=disable",
// as exported by `scripts/services env`.
const EnvPostgresDSN = "POSTGRES_DSN"

var (
	pgOnce sync.Once
	pgDSN  string
	pgErr  error
)

func resolvePostgres() {
	v := strings.TrimSpace(os.Getenv(EnvPostgresDSN))
	if v == "" {
		pgErr = errNotConfigured
		return
	}
	u, err := url.Parse(v)
	if err == nil && u.Host == "" {
		err = fmt.Errorf("no host:port")
	}
	if err == nil {
		host := u.Host
		if u.Port() == "" {
			host += ":5432"
		}
		err = checkReachable([]string{host}, 5*time.Second)
	}
	if err != nil {
		pgErr = fmt.Errorf("testenv: %s: %w; start it with `scripts/services up postgres` and export it with `eval \"$(scripts/services env)\"`, or run `make test`", EnvPostgresDSN, err)
		return
	}
	pgDSN = v
}

// PostgresDSN returns the URL of the real PostgreSQL server
// (POSTGRES_DSN), or skips t (fails it with STACKSAGA_REQUIRE_SERVICES=1).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	pgOnce.Do(resolvePostgres)
	switch {
	case pgErr == errNotConfigured:
		// Unavailable skips, or fails when services are required.
		Unavailable(t, fmt.Sprintf("PostgreSQL: %s is not set: start it with `scripts/services up postgres` "+
			"and export it with `eval \"$(scripts/services env)\"`, or run `make test`", EnvPostgresDSN))
		return ""
	case pgErr != nil:
		t.Fatal(pgErr)
	}
	return pgDSN
}

// PostgresSchema creates a fresh schema for t on the real PostgreSQL
// server, drops it (CASCADE) when t ends, and returns a URL whose
// connections use it (search_path) and the schema's name.
func PostgresSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	base := PostgresDSN(t)
	if base == "" {
		return "", ""
	}
	schema = UniqueName(t, "sb") // [a-z][a-z0-9_]{,47}: a valid identifier (pg_ is reserved)
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}
