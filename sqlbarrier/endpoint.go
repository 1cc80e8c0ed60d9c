package sqlbarrier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stacksaga-go/stacksaga/worker"
)

// Endpoint is a saga step whose effects are writes to the service's SQL
// database, made through the *sql.Tx the barrier opened. The handler must
// neither commit nor roll back tx: the barrier commits it with the step's
// barrier row once the handler returned nil, and rolls it back on an error.
// A handler's error is classified as worker.IsRetryable does, except that an
// unclassified error carrying SQLSTATE class 40 (serialization failure,
// deadlock) is retryable.
type Endpoint[T any] struct {
	// Name is what commands address.
	Name string
	// Process runs the step's forward action in tx.
	Process func(ctx context.Context, tx *sql.Tx, s *worker.Step, in T) (T, error)
	// Revert runs the step's compensation in tx. It runs only if the
	// process committed ok; otherwise the revert is a null compensation
	// (replied ok, entity unchanged). Optional: without it a revert only
	// records its row (which still makes a late process a no-op).
	Revert func(ctx context.Context, tx *sql.Tx, s *worker.Step, in T) (T, error)
}

// Register adds e to w as an endpoint whose commands run through b, which
// must be w's guard (worker.WithGuard(b)). It fails as worker.Register does,
// and with worker.ErrDuplicateEndpoint for a name b already has.
func Register[T any](w *worker.Worker, b *Barrier, e Endpoint[T]) error {
	if b == nil {
		return fmt.Errorf("%w: %q: nil barrier", worker.ErrInvalidEndpoint, e.Name)
	}
	if e.Process == nil {
		return fmt.Errorf("%w: %q has no Process handler", worker.ErrInvalidEndpoint, e.Name)
	}
	we := worker.Endpoint[T]{Name: e.Name, Process: wrap(e.Process)}
	if e.Revert != nil {
		we.Revert = wrap(e.Revert)
	}
	if err := worker.Register(w, we); err != nil {
		return err
	}
	if !b.add(e.Name) {
		return fmt.Errorf("%w: %q", worker.ErrDuplicateEndpoint, e.Name)
	}
	return nil
}

func wrap[T any](fn func(context.Context, *sql.Tx, *worker.Step, T) (T, error)) func(context.Context, *worker.Step, T) (T, error) {
	return func(ctx context.Context, s *worker.Step, in T) (T, error) {
		tx, ok := ctx.Value(txKey{}).(*sql.Tx)
		if !ok {
			return in, worker.NonRetryable(ErrNoBarrier)
		}
		out, err := fn(ctx, tx, s, in)
		if err != nil && transient(err) {
			err = worker.Retryable(err)
		}
		return out, err
	}
}

// transient reports an error the handler did not classify that carries a
// SQLSTATE of class 40 (transaction rollback: serialization failure,
// deadlock), which a new try may not meet.
func transient(err error) bool {
	var re *worker.RetryableError
	var ne *worker.NonRetryableError
	if errors.As(err, &re) || errors.As(err, &ne) {
		return false
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		code := st.SQLState()
		return len(code) == 5 && code[:2] == "40"
	}
	return false
}
