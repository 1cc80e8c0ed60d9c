package main

import (
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// --sql on the real Kafka and PostgreSQL, every command and reply delivered
// twice more, with the write protection off: the payment ledger holds one
// debit per saga and one refund per compensated saga, no double.
func TestSQLLedgerExactlyOnce(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	t.Setenv("POSTGRES_DSN", testenv.PostgresDSN(t))
	m, counts := demoSummary(t, "--sagas", "100", "--fail-rate", "0.2", "--duplicates", "2", "--mode", "none", "--sql",
		"--kafka", brokers[0], "--suffix", testenv.UniqueName(t, "sql"))
	checkCounts(t, counts, 100, 20)
	if m[len(m)-3] == "" {
		t.Fatalf("no sql_effects= in the summary: %q", m[0])
	}
	got := atoi(m, len(m)-2, len(m)-1)
	if got[0] != 120 || got[1] != 0 {
		t.Fatalf("sql_effects=%d sql_double_effects=%d, want 120 (100 debits, 20 refunds) and 0", got[0], got[1])
	}
}
