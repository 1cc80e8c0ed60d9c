package tracewindow

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// failure is the one function that turns a failure the client cannot act
// on (a store, index or broker error) into what the client is told: it
// logs err, the whole detail, at Warn on log under a new error id and
// returns a short stable text ("<what> (error id <id>; the detail is in the
// server's log)") with that id. The error itself, which names hosts,
// ports, keyspaces, tables and whatever its driver puts in it, never
// reaches the client. Every answer and document of the handler that
// reports such a failure goes through it (writeFailure, the health
// document's errors, the saga page's audit trail).
func failure(log *slog.Logger, what string, err error) (text, id string) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	id = hex.EncodeToString(b[:])
	log.Warn("tracewindow: "+what, "error_id", id, "err", err)
	return what + " (error id " + id + "; the detail is in the server's log)", id
}

// writeFailure answers code with failure's text and error id (and audit,
// what an admin action's answer says of its audit record, if not empty).
func writeFailure(w http.ResponseWriter, log *slog.Logger, code int, what string, err error, audit string) {
	text, id := failure(log, what, err)
	writeJSON(w, code, apiError{Error: text, ErrorID: id, Audit: audit})
}
