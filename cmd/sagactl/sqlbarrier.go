package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/stacksaga-go/stacksaga/internal/secretflag"
	"github.com/stacksaga-go/stacksaga/sqlbarrier"
)

// envSQLBarrierDSN names the PostgreSQL URL of sql-barrier apply when
// --dsn-file is not given.
const envSQLBarrierDSN = "STACKSAGA_SQLBARRIER_DSN"

const sqlBarrierUsage = `usage:
  sagactl sql-barrier print [--table stacksaga_barrier]
  sagactl sql-barrier apply [--table stacksaga_barrier] [--dsn-file f] [--timeout 1m]

print writes the barrier table's DDL (package sqlbarrier) to stdout; apply
creates the table in a PostgreSQL database, or migrates it to the current
version (sqlbarrier.CreateSchema: one transaction under an advisory lock;
safe to run from several instances at once). The database URL
(postgres://user:password@host:port/db?sslmode=...) comes from --dsn-file,
else from ` + envSQLBarrierDSN + `; --dsn takes a URL without a password only.
`

// runSQLBarrier runs sql-barrier print and apply.
func runSQLBarrier(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "print" && args[0] != "apply") {
		fmt.Fprint(stderr, sqlBarrierUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("sagactl sql-barrier "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	table := fs.String("table", sqlbarrier.DefaultTable, "barrier table, optionally schema-qualified")
	dsnFile := fs.String("dsn-file", "", "file holding the database URL")
	dsnFlag := fs.String("dsn", "", "database URL without a password (use --dsn-file or "+envSQLBarrierDSN+" for one with a password)")
	timeout := fs.Duration("timeout", time.Minute, "bound on the whole command")
	if err := secretflag.Parse(fs, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sagactl: unexpected arguments %q\n%s", fs.Args(), sqlBarrierUsage)
		return exitUsage
	}
	if args[0] == "print" {
		ddl, err := sqlbarrier.SchemaSQL(*table)
		if err != nil {
			fmt.Fprintf(stderr, "sagactl: %v\n", err)
			return exitUsage
		}
		fmt.Fprint(stdout, ddl)
		return exitOK
	}
	if err := sqlbarrier.ValidTable(*table); err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return exitUsage
	}
	dsn := strings.TrimSpace(os.Getenv(envSQLBarrierDSN))
	switch {
	case *dsnFile != "":
		b, err := os.ReadFile(*dsnFile)
		if err != nil {
			fmt.Fprintf(stderr, "sagactl: --dsn-file: %v\n", err)
			return exitUsage
		}
		dsn = strings.TrimSpace(string(b))
	case *dsnFlag != "":
		dsn = *dsnFlag // secretflag.Parse refused one with a password
	}
	if dsn == "" {
		fmt.Fprintf(stderr, "sagactl: sql-barrier apply: no database URL (--dsn-file, %s or --dsn)\n", envSQLBarrierDSN)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return exitFailure
	}
	defer db.Close()
	before, err := sqlbarrier.CreateSchema(ctx, db, *table)
	if err != nil {
		fmt.Fprintf(stderr, "sagactl: %v\n", err)
		return exitFailure
	}
	if before == sqlbarrier.SchemaVersion {
		fmt.Fprintf(stdout, "%s: at version %d, nothing to do\n", *table, before)
	} else {
		fmt.Fprintf(stdout, "%s: version %d -> %d\n", *table, before, sqlbarrier.SchemaVersion)
	}
	return exitOK
}
