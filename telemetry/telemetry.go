// Package telemetry holds what StackSaga's OpenTelemetry instrumentation
// shares: the names of its metrics and attributes, the propagation of W3C
// trace context through the wire envelope, a log/slog handler that stamps
// records with trace and span ids, and the Kafka client metrics.
//
// Telemetry is off by default. An orchestrator traces and counts once it is
// given a provider (orchestrator.WithTracerProvider,
// orchestrator.WithMeterProvider), a worker likewise
// (worker.WithTracerProvider, worker.WithMeterProvider); the Cassandra event
// store reports its round trips once asked (cassandra.Store.RegisterMetrics).
// Without providers no span is started, no instrument is created and no
// attribute is built on the hot path. Package telemetry/promexport serves the
// metrics at /metrics for Prometheus.
//
// # Traces
//
// One trace per saga. Start opens the root span ("<domain> start", or a child
// of the span in Start's context); every command carries the W3C trace
// context of the orchestrator span that sent it in the envelope's Trace map;
// the worker's span for the
// step attempt ("process <endpoint>", "revert <endpoint>") is its child and
// the reply carries the worker span's context back, so the orchestrator span
// that applies the reply ("<domain> reply") is a child of the step. The saga
// row keeps the trace id (eventstore.Transaction.TraceID, shown by the Trace
// Window) and the root's traceparent (eventstore.Transaction.TraceParent), from
// which the spans of re-drives, restores, resumes and pause deadlines
// ("<domain> redrive", …), which no message starts, continue the saga's trace
// from any process.
//
// # Metrics
//
// Names follow the OpenTelemetry semantic conventions where they define one
// (messaging.client.sent.messages, messaging.client.consumed.messages,
// messaging.client.operation.duration, db.client.operation.duration); the
// others are under the stacksaga namespace and listed as Metric* constants.
// Units are UCUM ("s", "By", "{saga}"); Prometheus sees them as
// stacksaga_saga_started_total, stacksaga_step_duration_seconds and so on.
package telemetry

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of StackSaga's tracers and meters.
const ScopeName = "github.com/stacksaga-go/stacksaga"

// Metric names of the orchestrator.
const (
	// MetricSagaStarted counts the sagas started ({saga}; attributes
	// AttrService, AttrDomain).
	MetricSagaStarted = "stacksaga.saga.started"
	// MetricSagaFinished counts the sagas that reached a terminal state
	// ({saga}; AttrService, AttrDomain, AttrSagaState: COMPLETED, COMPENSATED
	// or COMPENSATION_FAILED).
	MetricSagaFinished = "stacksaga.saga.finished"
	// MetricSagaDisabled counts the sagas frozen as DISABLED for outliving
	// their transaction lifetime ({saga}).
	MetricSagaDisabled = "stacksaga.saga.disabled"
	// MetricSagaStartFailed counts the Start calls whose create failed but
	// may have landed ({saga}; AttrService, AttrDomain, AttrStartResult:
	// marked, the saga was marked COMPENSATED and never runs; restorable,
	// not marked, and its watchdog restores it if the create landed;
	// unwatched, neither, so a create that landed stays in flight unsent).
	MetricSagaStartFailed = "stacksaga.saga.start_failed"
	// MetricSagaInFlight is the sagas started and not finished nor
	// disabled, as this orchestrator instance counts them ({saga}; an
	// up-down counter: sum it over the instances of a service, as one may
	// finish what another started).
	MetricSagaInFlight = "stacksaga.saga.in_flight"
	// MetricStepDuration is the time from a command's dispatch to its reply
	// being applied, as the saga sees its step ("s"; AttrService,
	// AttrDomain, AttrEndpoint, AttrStepKind, AttrOutcome).
	MetricStepDuration = "stacksaga.step.duration"
	// MetricStepRetried counts the steps re-driven from RETRY_PENDING
	// (by the retry node or Redrive) ({step}).
	MetricStepRetried = "stacksaga.step.retried"
	// MetricStepRestored counts the steps re-sent by restore pickups and
	// Restore ({step}).
	MetricStepRestored = "stacksaga.step.restored"
	// MetricStepExhausted counts the steps that failed after their retry
	// policy's last attempt ({step}).
	MetricStepExhausted = "stacksaga.step.exhausted"
	// MetricCommandsPublished counts the commands the orchestrator
	// published ({command}).
	MetricCommandsPublished = "stacksaga.command.published"
	// MetricRepliesReceived counts the replies read from the callback
	// topic ({reply}; AttrReplyResult: applied, stale or foreign).
	MetricRepliesReceived = "stacksaga.reply.received"
)

// Metric names of the worker and its guard.
const (
	// MetricHandlerDuration is the time a worker's step handler ran ("s";
	// AttrService, AttrEndpoint, AttrStepKind, AttrOutcome).
	MetricHandlerDuration = "stacksaga.handler.duration"
	// MetricCommandsProcessed counts the commands a worker handled and
	// replied to ({command}; AttrService).
	MetricCommandsProcessed = "stacksaga.command.processed"
	// MetricHandlerPanics counts handler panics ({panic}; AttrService).
	MetricHandlerPanics = "stacksaga.handler.panics"
	// MetricGuardExecutions counts the commands whose business handler the
	// write-protection guard let run ({command}; AttrService).
	MetricGuardExecutions = "stacksaga.guard.executions"
	// MetricGuardDuplicatesSkipped counts the duplicate deliveries the
	// guard did not run ({command}; AttrService).
	MetricGuardDuplicatesSkipped = "stacksaga.guard.duplicates_skipped"
	// MetricGuardLeaseWaits counts the waits for another execution's live
	// STRICT lease ({wait}; AttrService).
	MetricGuardLeaseWaits = "stacksaga.guard.lease_waits"
	// MetricGuardLeaseHeld counts the commands put back because a lease
	// outlived the wait ({command}; AttrService).
	MetricGuardLeaseHeld = "stacksaga.guard.lease_held"
	// MetricGuardNullCompensations counts the compensations recorded empty
	// because their action never ran ({command}; AttrService).
	MetricGuardNullCompensations = "stacksaga.guard.null_compensations"
	// MetricGuardRetryablesRecorded counts the retryable outcomes the guard
	// recorded, so that duplicates of the failed attempt re-send them
	// instead of running the handler ({command}; AttrService).
	MetricGuardRetryablesRecorded = "stacksaga.guard.retryables_recorded"
	// MetricGuardSuperseded counts the recorded outcomes of an attempt (a
	// retryable failure, a pause) that a later attempt of the same step
	// replaced ({command}; AttrService).
	MetricGuardSuperseded = "stacksaga.guard.superseded"
	// MetricGuardLostLeases counts the STRICT executions whose conditional
	// commit found their lease taken over: the step ran here and another
	// execution owns it now ({command}; AttrService).
	MetricGuardLostLeases = "stacksaga.guard.lost_leases"
)

// Metric names shared by the orchestrator and the worker.
const (
	// MetricDeadLettered counts the records sent to a dead-letter topic
	// ({record}; AttrComponent, AttrService, AttrDeadLetterReason and
	// messaging.destination.name, the record's source topic).
	MetricDeadLettered = "stacksaga.dead_lettered"
)

// Metric names of the Cassandra event store (cassandra.Store.RegisterMetrics).
const (
	// MetricCassandraRoundTrips counts the requests the store sent, first
	// attempts only ({request}; AttrRequestKind: read, write, lwt, batch,
	// other).
	MetricCassandraRoundTrips = "stacksaga.cassandra.round_trips"
	// MetricCassandraStatements counts the statements per table, those in
	// batches included ({statement}; db.collection.name, AttrRequestKind:
	// read, write or lwt).
	MetricCassandraStatements = "stacksaga.cassandra.statements"
	// MetricDBOperationDuration is the semantic conventions' histogram of
	// database requests ("s"; db.system.name, db.collection.name,
	// db.operation.name, error.type).
	MetricDBOperationDuration = "db.client.operation.duration"
)

// Metric names of the Kafka clients (KafkaMetrics).
const (
	// MetricKafkaSent is the semantic conventions' count of messages
	// produced ({message}; messaging.system, messaging.destination.name,
	// messaging.operation.name "send", messaging.client.id).
	MetricKafkaSent = "messaging.client.sent.messages"
	// MetricKafkaConsumed is the semantic conventions' count of messages
	// fetched ({message}; as MetricKafkaSent, operation "receive").
	MetricKafkaConsumed = "messaging.client.consumed.messages"
	// MetricKafkaOperationDuration is the semantic conventions' histogram
	// of produce requests, from write to response ("s"; as MetricKafkaSent,
	// plus error.type on failures).
	MetricKafkaOperationDuration = "messaging.client.operation.duration"
	// MetricKafkaIO counts the bytes written to and read from brokers
	// ("By"; network.io.direction, messaging.client.id).
	MetricKafkaIO = "stacksaga.kafka.io"
	// MetricKafkaConnects counts the broker connections opened
	// ({connection}; messaging.client.id, error.type on failures).
	MetricKafkaConnects = "stacksaga.kafka.connects"
	// MetricKafkaDisconnects counts the broker connections closed
	// ({connection}; messaging.client.id).
	MetricKafkaDisconnects = "stacksaga.kafka.disconnects"
	// MetricKafkaShareAckFailures counts the share-group acknowledgement
	// results that failed, one per partition of an acknowledge request
	// ({result}; messaging.system, messaging.client.id,
	// messaging.destination.name, messaging.operation.type "settle",
	// error.type; ShareAckFailures): the records of a lost accept, release
	// or reject are delivered again, those of a lost renewal lose their
	// lock while they are handled.
	MetricKafkaShareAckFailures = "stacksaga.kafka.share.ack_failures"
)

// Attribute keys of StackSaga's spans and metrics.
const (
	// AttrService is the service that embeds the orchestrator or worker.
	AttrService = attribute.Key("stacksaga.service")
	// AttrDomain is the saga domain.
	AttrDomain = attribute.Key("stacksaga.domain")
	// AttrTxID is the saga's transaction id (spans only).
	AttrTxID = attribute.Key("stacksaga.tx_id")
	// AttrSagaState is a saga state (eventstore.State).
	AttrSagaState = attribute.Key("stacksaga.saga.state")
	// AttrSagaStateFrom is the state a transition left (spans only).
	AttrSagaStateFrom = attribute.Key("stacksaga.saga.state_from")
	// AttrEndpoint is a step's endpoint: "service/endpoint" on the
	// orchestrator side, the endpoint name on the worker side.
	AttrEndpoint = attribute.Key("stacksaga.step.endpoint")
	// AttrStepKind is "process" or "revert".
	AttrStepKind = attribute.Key("stacksaga.step.kind")
	// AttrStepSpan is the step's index in the saga (spans only).
	AttrStepSpan = attribute.Key("stacksaga.step.span")
	// AttrAttempt is the step's attempt, from 1 (spans only).
	AttrAttempt = attribute.Key("stacksaga.step.attempt")
	// AttrOutcome is a step's outcome: ok, retryable, non_retryable (and,
	// on worker spans, suppressed when the guard sent nothing).
	AttrOutcome = attribute.Key("stacksaga.step.outcome")
	// AttrDuplicate marks a worker span whose command the guard did not run
	// (a duplicate delivery answered with the recorded reply).
	AttrDuplicate = attribute.Key("stacksaga.step.duplicate")
	// AttrReplyResult is what the orchestrator did with a reply: applied,
	// stale (a duplicate or late reply) or foreign (another deployment's).
	AttrReplyResult = attribute.Key("stacksaga.reply.result")
	// AttrStartResult is what became of a saga whose Start failed after
	// its create may have landed: marked, restorable or unwatched (see
	// MetricSagaStartFailed).
	AttrStartResult = attribute.Key("stacksaga.start.result")
	// AttrComponent is "orchestrator" or "worker".
	AttrComponent = attribute.Key("stacksaga.component")
	// AttrDeadLetterReason is the reason code of a dead letter (the part of
	// the reason header before the first colon, e.g. worker.ReasonOversize).
	AttrDeadLetterReason = attribute.Key("stacksaga.dead_letter.reason")
	// AttrRequestKind is the kind of a Cassandra request.
	AttrRequestKind = attribute.Key("stacksaga.cassandra.request_kind")
)

// Attribute values of AttrReplyResult.
const (
	ReplyApplied = "applied"
	ReplyStale   = "stale"
	ReplyForeign = "foreign"
)

// Attribute values of AttrStartResult.
const (
	StartMarked     = "marked"
	StartRestorable = "restorable"
	StartUnwatched  = "unwatched"
)

// DurationBuckets returns the bucket boundaries, in seconds, of StackSaga's
// latency histograms (step, handler): from a millisecond to five minutes.
func DurationBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
}
