package sqlbarrier

import "database/sql"

// SetCrash sets the function called at the named points of an execution
// ("handled", "committed").
func SetCrash(b *Barrier, f func(point string)) { b.crash = f }

// MarkEndpoint makes b run the commands of name through the barrier, as
// Register does, without a worker.
func MarkEndpoint(b *Barrier, name string) { b.add(name) }

// TxFrom returns the barrier's transaction a handler runs in (nil outside).
func TxFrom(ctx interface{ Value(any) any }) *sql.Tx {
	tx, _ := ctx.Value(txKey{}).(*sql.Tx)
	return tx
}
