package writeprotect_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/writeprotect"
)

// benchGuard measures the guard's overhead per step: "first" runs a fresh
// step (the business handler is a no-op), "duplicate" re-delivers a
// committed one. It reports the store statements per step.
func benchGuard(b *testing.B, be *backend, c statementCounter) {
	reply := &topics.Envelope{Outcome: topics.OutcomeOK, Payload: pl("done")}
	noop := func(context.Context) *topics.Envelope { return reply }
	for _, mode := range modes {
		for _, dup := range []bool{false, true} {
			name := string(mode) + "/first"
			if dup {
				name = string(mode) + "/duplicate"
			}
			b.Run(name, func(b *testing.B) {
				g := be.guard(b, mode)
				scope := uniqueScope(b)
				ctx := context.Background()
				cmd := command(scope, "tx-bench", 1, topics.KindProcess)
				if dup {
					if _, err := g.Execute(ctx, cmd, noop); err != nil {
						b.Fatal(err)
					}
				}
				c.reset()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if !dup {
						i++
						cmd.TxID = "tx-bench-" + strconv.Itoa(i)
					}
					if _, err := g.Execute(ctx, cmd, noop); err != nil {
						b.Fatal(err)
					}
				}
				n := c.counts()
				steps := float64(b.N)
				b.ReportMetric(float64(n.Reads)/steps, "reads/step")
				b.ReportMetric(float64(n.Writes)/steps, "writes/step")
				b.ReportMetric(float64(n.LWTs)/steps, "lwts/step")
			})
		}
	}
}

func BenchmarkGuardMemory(b *testing.B) {
	be := memoryBackend(b)
	cs := &countingStore{Store: be.store}
	be.store = cs
	benchGuard(b, be, cs)
}

func BenchmarkGuardCassandra(b *testing.B) {
	be, s := cassandraBackend(b)
	benchGuard(b, be, cassandraCounter{s})
}

// The per-step statements with the terminal fence, for comparison.
func BenchmarkGuardMemoryFence(b *testing.B) {
	be := memoryBackend(b)
	cs := &countingStore{Store: be.store}
	be.store = cs
	g := be.guard(b, writeprotect.Strict, writeprotect.WithTerminalFence())
	reply := &topics.Envelope{Outcome: topics.OutcomeOK, Payload: pl("done")}
	cmd := command(uniqueScope(b), "tx", 1, topics.KindProcess)
	i := 0
	for b.Loop() {
		i++
		cmd.TxID = "tx-" + strconv.Itoa(i)
		if _, err := g.Execute(context.Background(), cmd, func(context.Context) *topics.Envelope { return reply }); err != nil {
			b.Fatal(err)
		}
	}
	n := cs.counts()
	b.ReportMetric(float64(n.Reads+n.Writes+n.LWTs)/float64(b.N), "stmts/step")
}
