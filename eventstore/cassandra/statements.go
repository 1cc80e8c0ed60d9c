package cassandra

import "strings"

// Table names of the schema.
const (
	TableTransaction        = "es_transaction"
	TableTransactionTryout  = "es_transaction_tryout"
	TableFrozenTransaction  = "es_frozen_transaction"
	TableExecutionMarkers   = "es_execution_markers"
	TableDaysByYear         = "es_days_by_year"
	TableWindowsByDay       = "es_recovery_windows_by_day"
	TableInstancesByWindow  = "es_instances_by_recovery_window"
	TableBucketsByInstance  = "es_buckets_by_instance"
	TableRecoveryByInstance = "es_recovery_transactions_by_instance"
	TableAdminAudit         = "es_admin_audit"
	TableBusinessKey        = "es_business_key"
)

// keyspacePlaceholder stands for the keyspace in the statements below.
const keyspacePlaceholder = "{ks}"

var tableNames = []string{
	TableTransaction, TableTransactionTryout, TableFrozenTransaction, TableExecutionMarkers,
	TableDaysByYear, TableWindowsByDay, TableInstancesByWindow, TableBucketsByInstance, TableRecoveryByInstance,
	TableAdminAudit,
	TableBusinessKey,
}

// Every statement of the store. Each names a full partition key (INSERTs
// bind every primary-key column); none uses ALLOW FILTERING; lint_test.go
// checks both against schema.cql. {ks} is replaced by the keyspace.
const (
	cqlInsertTxIfNotExists = `INSERT INTO {ks}.es_transaction (region, cluster, service_name, transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS`
	cqlUpsertTx            = `INSERT INTO {ks}.es_transaction (region, cluster, service_name, transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	cqlSelectTxState       = `SELECT running_status FROM {ks}.es_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
	cqlSelectTxFenced      = `SELECT domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at, WRITETIME(version) FROM {ks}.es_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
	cqlSelectTx            = `SELECT domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at FROM {ks}.es_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`

	cqlInsertTryout  = `INSERT INTO {ks}.es_transaction_tryout (region, cluster, service_name, transaction_id, tryout_index, span, kind, endpoint, attempt, outcome, error, entity_before, entity_after, resume_context, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	cqlDeleteTryout  = `DELETE FROM {ks}.es_transaction_tryout USING TIMESTAMP ? WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND tryout_index = ?`
	cqlDeleteTryouts = `DELETE FROM {ks}.es_transaction_tryout USING TIMESTAMP ? WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND tryout_index >= ?`
	cqlSelectTryouts = `SELECT tryout_index, span, kind, endpoint, attempt, outcome, error, entity_before, entity_after, resume_context, started_at, finished_at FROM {ks}.es_transaction_tryout WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`

	cqlInsertFrozen      = `INSERT INTO {ks}.es_frozen_transaction (region, cluster, service_name, transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at, reason, frozen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	cqlDeleteFrozen      = `DELETE FROM {ks}.es_frozen_transaction USING TIMESTAMP ? WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
	cqlSelectFrozenOne   = `SELECT transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at, reason, frozen_at FROM {ks}.es_frozen_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
	cqlSelectFrozenAfter = `SELECT transaction_id, domain, running_status, version, span, kind, endpoint, attempt, payload, completed, hints, error, restore_date, restore_window, restore_instance_id, restore_bucket, paused_until, lifetime_start, pause_event, trace_id, trace_parent, definition_version, created_at, updated_at, reason, frozen_at FROM {ks}.es_frozen_transaction WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id > ? LIMIT ?`

	cqlInsertMarkerIfNotExists = `INSERT INTO {ks}.es_execution_markers (region, cluster, service_name, transaction_id, span, kind, site, state, owner, reply, lease_until, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?`
	cqlPutMarker               = `INSERT INTO {ks}.es_execution_markers (region, cluster, service_name, transaction_id, span, kind, site, state, owner, reply, lease_until, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?`
	cqlCommitMarker            = `UPDATE {ks}.es_execution_markers USING TTL ? SET state = ?, owner = ?, reply = ?, lease_until = ?, updated_at = ? WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND span = ? AND kind = ? AND site = ? IF state = ? AND owner = ?`
	cqlDeleteMarkerIf          = `DELETE FROM {ks}.es_execution_markers WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND span = ? AND kind = ? AND site = ? IF state = ? AND owner = ?`
	cqlSelectMarker            = `SELECT span, kind, site, state, owner, reply, updated_at, TTL(state) FROM {ks}.es_execution_markers WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND span = ? AND kind = ? AND site = ?`
	cqlSelectMarkers           = `SELECT span, kind, site, state, owner, reply, updated_at, TTL(state) FROM {ks}.es_execution_markers WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
	cqlDeleteMarker            = `DELETE FROM {ks}.es_execution_markers WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? AND span = ? AND kind = ? AND site = ?`
	cqlDeleteMarkers           = `DELETE FROM {ks}.es_execution_markers WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`

	cqlUpsertDay      = `INSERT INTO {ks}.es_days_by_year (region, cluster, service_name, year, date_of_year) VALUES (?, ?, ?, ?, ?)`
	cqlSelectDays     = `SELECT date_of_year FROM {ks}.es_days_by_year WHERE region = ? AND cluster = ? AND service_name = ? AND year = ? AND date_of_year >= ? AND date_of_year <= ?`
	cqlDeleteDay      = `DELETE FROM {ks}.es_days_by_year WHERE region = ? AND cluster = ? AND service_name = ? AND year = ? AND date_of_year = ?`
	cqlUpsertWindow   = `INSERT INTO {ks}.es_recovery_windows_by_day (region, cluster, service_name, date_of_year, minute_of_day) VALUES (?, ?, ?, ?, ?)`
	cqlSelectWindows  = `SELECT minute_of_day FROM {ks}.es_recovery_windows_by_day WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ?`
	cqlDeleteWindow   = `DELETE FROM {ks}.es_recovery_windows_by_day WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ?`
	cqlUpsertInstance = `INSERT INTO {ks}.es_instances_by_recovery_window (region, cluster, service_name, date_of_year, minute_of_day, instance_id_token, instance_id) VALUES (?, ?, ?, ?, ?, ?, ?)`
	cqlSelectInstance = `SELECT instance_id_token, instance_id FROM {ks}.es_instances_by_recovery_window WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id_token >= ? AND instance_id_token <= ?`
	cqlAnyInstance    = `SELECT instance_id FROM {ks}.es_instances_by_recovery_window WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? LIMIT 1`
	cqlDeleteInstance = `DELETE FROM {ks}.es_instances_by_recovery_window WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id_token = ? AND instance_id = ?`
	cqlUpsertBucket   = `INSERT INTO {ks}.es_buckets_by_instance (region, cluster, service_name, date_of_year, minute_of_day, instance_id, bucket_index) VALUES (?, ?, ?, ?, ?, ?, ?)`
	cqlSelectBuckets  = `SELECT bucket_index FROM {ks}.es_buckets_by_instance WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id = ?`
	cqlDeleteBucket   = `DELETE FROM {ks}.es_buckets_by_instance WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id = ? AND bucket_index = ?`
	cqlUpsertEntry    = `INSERT INTO {ks}.es_recovery_transactions_by_instance (region, cluster, service_name, date_of_year, minute_of_day, instance_id, bucket_index, transaction_id, domain, running_status, instance_id_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	cqlSelectEntries  = `SELECT transaction_id, domain, running_status, instance_id_token FROM {ks}.es_recovery_transactions_by_instance WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id = ? AND bucket_index = ? AND transaction_id > ? LIMIT ?`
	cqlDeleteEntry    = `DELETE FROM {ks}.es_recovery_transactions_by_instance WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id = ? AND bucket_index = ? AND transaction_id = ?`
	cqlDropBucket     = `DELETE FROM {ks}.es_recovery_transactions_by_instance WHERE region = ? AND cluster = ? AND service_name = ? AND date_of_year = ? AND minute_of_day = ? AND instance_id = ? AND bucket_index = ?`

	cqlInsertAudit          = `INSERT INTO {ks}.es_admin_audit (region, cluster, service_name, transaction_id, acted_at, record_id, actor, action, detail, result, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	cqlSelectAudit          = `SELECT acted_at, actor, action, detail, result, error FROM {ks}.es_admin_audit WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ?`
	cqlSelectAuditLatest    = `SELECT acted_at, actor, action, detail, result, error FROM {ks}.es_admin_audit WHERE region = ? AND cluster = ? AND service_name = ? AND transaction_id = ? ORDER BY acted_at DESC, record_id DESC LIMIT ?`
	cqlInsertKeyIfNotExists = `INSERT INTO {ks}.es_business_key (region, cluster, service_name, domain, business_key, transaction_id, payload, created_at, owner, generation, claimed_at, settled) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?`
	cqlReplaceKeyIf         = `UPDATE {ks}.es_business_key USING TTL ? SET transaction_id = ?, payload = ?, created_at = ?, owner = ?, generation = ?, claimed_at = ?, settled = ? WHERE region = ? AND cluster = ? AND service_name = ? AND domain = ? AND business_key = ? IF owner = ? AND settled = ?`
	cqlDeleteKeyIf          = `DELETE FROM {ks}.es_business_key WHERE region = ? AND cluster = ? AND service_name = ? AND domain = ? AND business_key = ? IF owner = ? AND settled = ?`
	cqlSelectKey            = `SELECT transaction_id, payload, created_at, owner, generation, claimed_at, settled FROM {ks}.es_business_key WHERE region = ? AND cluster = ? AND service_name = ? AND domain = ? AND business_key = ?`
)

// statements holds the store's statements with the keyspace filled in.
type statements struct {
	insertTxIfNotExists, upsertTx, selectTx, selectTxState          string
	selectTxFenced                                                  string
	insertTryout, selectTryouts, deleteTryout, deleteTryouts        string
	insertFrozen, deleteFrozen, selectFrozenOne, selectFrozenAfter  string
	insertMarkerIfNotExists, putMarker, selectMarker, selectMarkers string
	deleteMarker, deleteMarkers, commitMarker, deleteMarkerIf       string
	upsertDay, selectDays, deleteDay                                string
	upsertWindow, selectWindows, deleteWindow                       string
	upsertInstance, selectInstances, anyInstance, deleteInstance    string
	upsertBucket, selectBuckets, deleteBucket                       string
	upsertEntry, selectEntries, deleteEntry, dropBucket             string
	insertAudit, selectAudit, selectAuditLatest                     string
	insertKeyIfNotExists, replaceKeyIf, deleteKeyIf, selectKey      string
}

func newStatements(keyspace string) statements {
	r := func(s string) string { return strings.ReplaceAll(s, keyspacePlaceholder, keyspace) }
	return statements{
		insertTxIfNotExists: r(cqlInsertTxIfNotExists), upsertTx: r(cqlUpsertTx), selectTx: r(cqlSelectTx), selectTxState: r(cqlSelectTxState),
		selectTxFenced: r(cqlSelectTxFenced),
		insertTryout:   r(cqlInsertTryout), selectTryouts: r(cqlSelectTryouts), deleteTryout: r(cqlDeleteTryout), deleteTryouts: r(cqlDeleteTryouts),
		insertFrozen: r(cqlInsertFrozen), deleteFrozen: r(cqlDeleteFrozen), selectFrozenOne: r(cqlSelectFrozenOne), selectFrozenAfter: r(cqlSelectFrozenAfter),
		insertMarkerIfNotExists: r(cqlInsertMarkerIfNotExists), putMarker: r(cqlPutMarker), selectMarker: r(cqlSelectMarker), selectMarkers: r(cqlSelectMarkers),
		deleteMarker: r(cqlDeleteMarker), deleteMarkers: r(cqlDeleteMarkers), commitMarker: r(cqlCommitMarker), deleteMarkerIf: r(cqlDeleteMarkerIf),
		upsertDay: r(cqlUpsertDay), selectDays: r(cqlSelectDays), deleteDay: r(cqlDeleteDay),
		upsertWindow: r(cqlUpsertWindow), selectWindows: r(cqlSelectWindows), deleteWindow: r(cqlDeleteWindow),
		upsertInstance: r(cqlUpsertInstance), selectInstances: r(cqlSelectInstance), anyInstance: r(cqlAnyInstance), deleteInstance: r(cqlDeleteInstance),
		upsertBucket: r(cqlUpsertBucket), selectBuckets: r(cqlSelectBuckets), deleteBucket: r(cqlDeleteBucket),
		upsertEntry: r(cqlUpsertEntry), selectEntries: r(cqlSelectEntries), deleteEntry: r(cqlDeleteEntry), dropBucket: r(cqlDropBucket),
		insertAudit: r(cqlInsertAudit), selectAudit: r(cqlSelectAudit), selectAuditLatest: r(cqlSelectAuditLatest),
		insertKeyIfNotExists: r(cqlInsertKeyIfNotExists), replaceKeyIf: r(cqlReplaceKeyIf), deleteKeyIf: r(cqlDeleteKeyIf),
		selectKey: r(cqlSelectKey),
	}
}
