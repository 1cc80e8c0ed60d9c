// Package tracewindow is the Trace Window: a JSON API and a web page over
// one scope's event store (region, cluster, service) that show each saga's
// step timeline, its compensation trail, its retry audit and the live
// health of the sagas in flight. An orchestrator service mounts the
// Handler on its own mux (what seed 003, the design document of the Kafka
// framework, calls the "connector"; see docs/design.md); `sagactl trace-window`
// serves the same from the store alone.
//
// Wiring, in a service that embeds an orchestrator on Cassandra:
//
//	idx, err := cassandraindex.New(ctx, cassandraCfg) // its own table, created if absent
//	defer idx.Close()
//	scope := eventstore.Scope{Region: "default", Cluster: "default", Service: "order-service"}
//	o, err := orchestrator.New("order-service", domain, orchestrator.WithStore(store),
//		orchestrator.WithListener(tracewindow.Listener(idx, scope)))
//	tw, err := tracewindow.New(store, scope, tracewindow.WithIndex(idx),
//		tracewindow.WithReadToken(readToken)) // no read authentication: ErrNoReadAuth
//	mux.Handle("/trace/", http.StripPrefix("/trace", tw))
//
// On the in-memory store, use NewMemoryIndex instead of cassandraindex; the
// package's Example runs this wiring so.
//
// # API
//
// Every route answers JSON; every error is {"error": "..."} with a 4xx or
// 5xx status.
//
//	GET  /api/config                 scope, whether listing works, the admin actions enabled
//	GET  /api/domains                domains seen by the index
//	GET  /api/sagas                  list: ?domain=&state=A,B|in_flight&from=&to=&after=&limit=
//	GET  /api/sagas/{txid}           one saga: row, timeline, compensation trail, retry audit, steps, admin audit trail
//	GET  /api/search?tx={txid}       find a saga by transaction id (the store alone)
//	GET  /api/health                 in-flight counts by state and domain, oldest in flight, retry-pending, frozen
//	POST /api/sagas/{txid}/{action}  restore | redrive | resend | resume (admin only)
//
// Lists are newest first (by transaction id, which starts with the
// creation time), cover a creation-time range (from, to: RFC 3339 or unix
// milliseconds; default the last 24 hours, at most 31 days), and page with
// the cursor "next" passed back as "after". A list reads each listed
// saga's state from the store; the health counts come from the index (and
// the recovery directory and frozen table, states checked in the store),
// computed at most every WithHealthCache (health_cache_ms in
// /api/config); a state change a list or an admin action reads from the
// store is written to the index and ends the cached health at once.
//
// # Admin actions
//
// The Trace Window is read-only unless WithAdmin enables actions. Each
// action is a POST with "Authorization: Bearer <token>" and
// "Content-Type: application/json"; no cookie is ever used, so a
// cross-site form can neither authenticate nor send that content type, and
// browsers' cross-origin POSTs are refused as well
// (http.CrossOriginProtection).
//
// Every action that passes authentication and names a valid transaction id
// is audited: one record per action in the saga's audit trail in the store
// (eventstore.Auditor: who, when, what, result, error), whatever its
// outcome, shown on the saga's page ("audit" in GET /api/sagas/{txid}, a
// table and markers on the timeline). WithActor names the person behind an
// authenticating proxy. New refuses WithAdmin over a store that keeps no
// audit trail (ErrNoAudit) unless WithUnauditedAdmin allows it. See Admin.
//
// # Listing without scans
//
// The event store keys sagas by transaction id alone. Listing needs an
// Index: MemoryIndex, or cassandraindex.Index, whose table
// es_transactions_by_bucket is partitioned by (region, cluster,
// service_name, domain, hour of creation) and clustered by transaction id
// descending, so every read names one partition and a clustering range:
// no ALLOW FILTERING, no scan. The orchestrator feeds the index through
// Listener; the Cassandra index writes asynchronously, in batches, off the
// reply path, but for a saga's end, which it writes through before the
// orchestrator deletes the saga's watchdog. A process killed with entries
// queued loses them until Repair, run at the next start, writes them again
// from the store (the recovery directory names every saga whose end the
// index may lack).
package tracewindow
