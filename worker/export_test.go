package worker

import "time"

// PendingPartitions returns, for tests, the partitions of the command
// records whose reply w keeps for a retry, with how many each.
func PendingPartitions(w *Worker) map[int32]int {
	out := make(map[int32]int)
	w.pending.Range(func(k, _ any) bool {
		out[k.(recordID).partition]++
		return true
	})
	return out
}

// FileApplied returns, for tests, the brokers and session timeout
// WithConfig set.
func FileApplied(w *Worker) (brokers []string, session time.Duration) {
	return w.cfg.brokers, w.cfg.membership.SessionTimeout
}
