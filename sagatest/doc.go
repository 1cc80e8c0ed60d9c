// Package sagatest is a harness for testing sagas and their steps end to
// end. It runs orchestrators and workers in-process, on an in-process kfake
// broker and the in-memory event store by default, or on real Kafka and
// Cassandra (WithKafka, WithCassandra), and it injects the delivery faults
// an at-least-once system lives with. It counts every execution of a
// business handler per (transaction, span, kind, attempt), so that a test
// can assert that a step ran exactly once (once per attempt, if it was
// retried) however often its command arrived.
//
//	func TestPlaceOrder(t *testing.T) {
//		env := sagatest.New(t, sagatest.DuplicateCommands(2), sagatest.TwinWorkers(),
//			sagatest.WithWriteProtection(writeprotect.Strict))
//		sagatest.Worker(env, "payment-service", func(w *worker.Worker) error {
//			return worker.Register(w, chargeEndpoint)
//		})
//		o := sagatest.Orchestrator(env, "order-service", placeOrderDomain)
//		id, err := o.Start(t.Context(), Order{ID: "o-1"})
//		...
//		if s := env.WaitTerminal(o, id)[id]; s != eventstore.StateCompleted {
//			t.Fatalf("saga ended %s", s)
//		}
//		env.AssertExactlyOnce()
//	}
//
// Start the workers before the sagas: a command to a service that has no
// command topic yet is not delivered.
//
// # Faults
//
//   - DuplicateCommands(k): a relay appends k copies of every command
//     record to its topic partition, behind the original (copies carry the
//     HeaderCopy header and are not copied again).
//   - DuplicateReplies(k): workers reply to a staging topic, from which a
//     relay writes every reply k+1 times to the domain's callback topic.
//   - ReorderReplies: replies go through that relay, which keeps a copy
//     of the latest reply of each saga and writes it again, marked with
//     HeaderStale, right after the saga's next reply with another (span,
//     kind, attempt): a stale reply arriving after a newer one, which the
//     orchestrator must ignore. (A saga has one command in flight, so its
//     different replies cannot overtake each other otherwise.)
//   - TwinWorkers: every worker service runs two instances in two consumer
//     groups, so each command reaches both; the first to receive a command
//     waits up to TwinWindow for the other, so both hand it to their
//     guards together.
//   - RestartWorkersEvery(n) and Service.Restart: restart with
//     redelivery. A worker instance is stopped gracefully (the handlers in
//     flight finish, reply and commit), its group's committed offsets are
//     set back to where they stood when it started, and a new instance is
//     started: the commands the stopped one handled since it started are
//     delivered again to its replacement. No handler is interrupted.
//   - CrashWorkersEvery(n): a worker instance crashes in the middle of a
//     command every n executions (the first at one the seed chooses),
//     alternating, per instance, between before its handler runs (a
//     STRICT guard holds the step's lease) and after its guard returned
//     the reply (the step's marker is committed) but before the reply is
//     sent. No
//     command still in the instance's guard replies, nothing past the
//     crashed command on its partition is committed, and the instance's
//     replacement is handed the command again. A handler
//     killed half way through its side effects is not simulated
//     (writeprotect's kill test SIGKILLs a real process there).
//
// # Seed and replay
//
// The fault schedule (where CrashWorkersEvery crashes each instance) is
// drawn from the env's seed, random unless WithSeed sets it. When a test
// fails, the harness prints the seed and the faults it injected (in its
// own failure messages, and at the end of a test that failed otherwise);
// Env.Seed and Env.Faults return them. Rerun with WithSeed(seed) to get
// the same faults at the same executions of the same instances; with sagas
// started one at a time the run repeats, assertion failure included.
//
// # Counting
//
// Executions are counted at the worker's guard seam: each call of the
// function a worker.Guard is handed (which runs the endpoint's Process or
// Revert) is one execution, whatever the guard. Register endpoints with
// worker.Register as usual, and give guards to the harness with WithGuard
// or WithWriteProtection rather than worker.WithGuard. Settle waits until
// every record produced has been handled and committed by every consumer,
// so that late duplicates are counted before a test looks at the counts;
// AssertExactlyOnce settles first. It then checks both halves of "exactly
// once", per attempt: no attempt of a step ran twice, no later attempt ran
// after an earlier one was answered ok (a double effect across attempts),
// and the attempt whose reply ok or non_retryable its saga recorded in the
// event store (the orchestrator's tryouts) did run, null compensations (of
// an action that never ran, or failed) excepted.
//
// The re-invocations the framework documents run again with the next
// attempt and are not double effects: a later attempt of a step whose
// earlier attempt failed (retryably, the saga re-driven; or for good, the
// saga restored after COMPENSATION_FAILED) and a later attempt of a step
// whose earlier attempt paused its saga (invoked again after the pause's
// deadline). A later attempt after an ok reply is answered by a guard with
// that reply, without running. The rule is answer.ForAttempt's, the one
// the guards follow.
//
// # Names
//
// The harness names the consumer groups (the default names; the second
// twin adds ".twin") and creates the topics it needs with WithPartitions
// partitions. On a real broker the service and domain names are used as
// they are: tests sharing a broker must use unique names (see
// internal/testenv's UniqueName in this module's own tests).
//
// Everything the harness starts is stopped when the test ends, in
// t.Cleanup; no goroutine is left behind.
package sagatest
