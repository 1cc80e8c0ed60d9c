package cassandra

import gocql "github.com/apache/cassandra-gocql-driver/v2"

// SetDeleteHook makes s call f before each statement or batch that
// DeleteRecoveryEntry sends, with the transaction ids it carries. Set it
// before the first delete.
func SetDeleteHook(s *Store, f func(txIDs []string)) { s.deletes.sent = f }

// QueuedDeletes is the number of deletes waiting behind one in flight, over
// every partition.
func QueuedDeletes(s *Store) int {
	s.deletes.mu.Lock()
	defer s.deletes.mu.Unlock()
	n := 0
	for _, waiting := range s.deletes.parts {
		for _, g := range waiting {
			n += len(g.txIDs)
		}
	}
	return n
}

// WithClusterConfig makes New call f on the driver configuration before it
// connects (a test's host selection, for instance).
func WithClusterConfig(f func(*gocql.ClusterConfig)) Option {
	return optFunc(func(o *options) { o.cluster = f })
}
