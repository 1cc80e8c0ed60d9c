package tracewindow

import (
	"net"
	"net/http"
	"strings"
)

// hostNotAllowed is the stable answer to a request whose Host header names a
// host the Trace Window does not serve.
const hostNotAllowed = "host not allowed: the Trace Window answers only its listener's address, localhost and the names given with WithAllowedHosts (sagactl trace-window --allowed-host)"

// WithAllowedHosts adds host names (without port, case-insensitive) the
// Trace Window answers besides IP addresses and localhost: the names users
// type to reach it, such as "orders.internal" or a proxy's public name. A
// request with any other Host header is refused with 421 Misdirected
// Request, so that a web page cannot read the Trace Window through a name
// it rebinds to the listener's address (DNS rebinding).
func WithAllowedHosts(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
				c.allowedHosts = append(c.allowedHosts, strings.TrimSuffix(n, "."))
			}
		}
	}
}

// hostAllowed reports whether the Host header host (with or without a
// port) names a host the Trace Window serves: an IP literal (a page can
// reach an address only under its own origin's name, never under an IP it
// does not hold), localhost or a name under .localhost (resolved to
// loopback by the browser itself), or one of allowed.
func hostAllowed(host string, allowed []string) bool {
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" {
		return false
	}
	if net.ParseIP(h) != nil || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	for _, a := range allowed {
		if h == a {
			return true
		}
	}
	return false
}

// checkHost answers 421 and reports false when r's Host is not served.
func (h *Handler) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if hostAllowed(r.Host, h.cfg.allowedHosts) {
		return true
	}
	h.cfg.logger.Warn("tracewindow: request for a host that is not allowed refused (add it with WithAllowedHosts if it is yours)",
		"host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
	writeJSON(w, http.StatusMisdirectedRequest, apiError{Error: hostNotAllowed})
	return false
}
