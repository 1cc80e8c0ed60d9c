package sqlbarrier_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stacksaga-go/stacksaga/topics"
)

// BenchmarkStep measures a step writing one ledger row on the real
// PostgreSQL: "plain-tx" is the write in a transaction of its own (the step
// without a barrier), "barrier/first" the same write through the barrier
// (its row's insert and the reply's update added: 2 statements), and
// "barrier/duplicate" the answer to a redelivery (insert, read: no write).
// Compare with writeprotect's BenchmarkGuardCassandra/STRICT.
func BenchmarkStep(b *testing.B) {
	db, _ := openDB(b)
	ctx := context.Background()
	b.Run("plain-tx", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (tx_id, span, kind, amount) VALUES ($1, $2, $3, $4)`, "plain-"+strconv.Itoa(i), 0, "process", 10); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, dup := range []bool{false, true} {
		name := "barrier/first"
		if dup {
			name = "barrier/duplicate"
		}
		b.Run(name, func(b *testing.B) {
			br := newBarrier(b, db)
			h := &handler{outcome: topics.OutcomeOK}
			cmd := command("bench-"+name, 0, topics.KindProcess, 1)
			if dup {
				if _, err := br.Execute(ctx, cmd, h.run(cmd)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !dup {
					i++
					cmd.TxID = "bench-" + strconv.Itoa(i)
				}
				if _, err := br.Execute(ctx, cmd, h.run(cmd)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
