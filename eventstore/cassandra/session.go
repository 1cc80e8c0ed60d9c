package cassandra

import (
	"context"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// WithDefaults returns c with its zero fields set to their defaults (what
// New, LoadConfig and ClusterConfig do before they validate).
func (c Config) WithDefaults() Config { return c.withDefaults() }

// ClusterConfig returns the driver configuration the store connects with:
// c with defaults filled in and validated (an invalid c fails with an
// error wrapping ErrInvalidConfig), its contact points and keyspace,
// token-aware routing over DC-aware round robin in the local data centre,
// the write and serial consistency levels, the request and connect
// timeouts, the pool size, the timestamp generator, the reconnection and
// retry policies, the credentials and TLS. Packages that keep tables of their
// own in the event store's keyspace (tracewindow/cassandraindex) connect
// with it, adjusting what is theirs (pool size, observers, logger), so
// that they follow every connection setting of stacksaga.cassandra.
func (c Config) ClusterConfig() (*gocql.ClusterConfig, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c.cluster(nil, nil)
}

// Connect opens a session with cl, giving up (and closing the session
// when it comes late) when ctx ends first.
func Connect(ctx context.Context, cl *gocql.ClusterConfig) (*gocql.Session, error) {
	return createSession(ctx, cl)
}

// Driver returns the driver's consistency level named by c (LOCAL_QUORUM
// for an empty or unknown name).
func (c Consistency) Driver() gocql.Consistency { return c.gocql() }
